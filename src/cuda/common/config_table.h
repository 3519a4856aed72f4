/* config_table.h - what every op's configuration table (src/cuda/<op>/configs.h)
 * shares: the names array the autotuner takes, built once from the rows. */
#ifndef SF_CONFIG_TABLE_H
#define SF_CONFIG_TABLE_H

/* rows[i].name for every row, in row order: a function-local static filled
 * once (thread-safe, C++11), so no name is written twice. */
template <typename Row, int N> static const char *const *sf_config_names(const Row (&rows)[N]) {
    static const char *names[N];
    static const bool done = [&] {
        for (int i = 0; i < N; i++) names[i] = rows[i].name;
        return true;
    }();
    (void)done;
    return names;
}

#endif
