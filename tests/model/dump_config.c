/* dump_config.c - opens a checkpoint and prints its sfm_config as one JSON
 * object, then one line per tensor ("name type d0,d1,..."): the helper of
 * test_config_hf.py, which compares it with transformers. Exit 1 with the
 * status and message on failure. With TENSOR FILE, also writes that
 * tensor's bytes (as the loader exposes them) to FILE. */
#include <stdio.h>

#include "checkpoint.h"

int main(int argc, char **argv) {
    if (argc != 2 && argc != 4) {
        fprintf(stderr, "usage: dump_config PATH [TENSOR FILE]\n");
        return 2;
    }
    sfm_checkpoint *c;
    char err[512];
    sf_status s = sfm_checkpoint_open(argv[1], &c, err, sizeof err);
    if (s != SF_OK) {
        printf("error %d %s\n", (int)s, err);
        return 1;
    }
    const sfm_config *g = sfm_checkpoint_config(c);
    printf("{\"arch\": \"%s\", \"vocab_size\": %d, \"hidden_size\": %d, \"num_layers\": %d, "
           "\"max_position\": %d, \"norm_eps\": %.17g, \"tie_embeddings\": %d, \"bos_token_id\": %d, "
           "\"eos_token_id\": %d, \"num_heads\": %d, \"num_kv_heads\": %d, \"head_dim\": %d, "
           "\"intermediate_size\": %d, \"attn_bias\": %d, \"rope_theta\": %.17g, \"rope_dim\": %d, "
           "\"rope_scaling\": %d, \"rope_factor\": %.17g, \"rope_low_freq_factor\": %.17g, "
           "\"rope_high_freq_factor\": %.17g, \"rope_original_max_position\": %d, \"ssm_heads\": %d, "
           "\"ssm_head_dim\": %d, \"ssm_state\": %d, \"ssm_groups\": %d, \"ssm_conv_kernel\": %d, "
           "\"ssm_chunk\": %d, \"ssm_inner\": %d, \"ssm_norm_before_gate\": %d, \"ssm_time_step_min\": %.17g, "
           "\"ssm_time_step_max\": %.17g, \"ssm_time_step_limit_lo\": %.17g, \"ssm_time_step_limit_hi\": %.17g, "
           "\"layer_is_attn\": [",
           sfm_arch_name(g->arch), g->vocab_size, g->hidden_size, g->num_layers, g->max_position, g->norm_eps,
           g->tie_embeddings, g->bos_token_id, g->eos_token_id, g->num_heads, g->num_kv_heads, g->head_dim,
           g->intermediate_size, g->attn_bias, g->rope_theta, g->rope_dim, (int)g->rope_scaling, g->rope_factor,
           g->rope_low_freq_factor, g->rope_high_freq_factor, g->rope_original_max_position, g->ssm_heads,
           g->ssm_head_dim, g->ssm_state, g->ssm_groups, g->ssm_conv_kernel, g->ssm_chunk, g->ssm_inner,
           g->ssm_norm_before_gate, g->ssm_time_step_min, g->ssm_time_step_max, g->ssm_time_step_limit_lo,
           g->ssm_time_step_limit_hi > 1e308 ? 1e308 : g->ssm_time_step_limit_hi);
    for (int i = 0; g->layer_is_attn && i < g->num_layers; i++) printf("%s%d", i ? ", " : "", g->layer_is_attn[i]);
    printf("]}\n");
    for (int i = 0; i < sfm_checkpoint_count(c); i++) {
        const sfm_tensor *t = sfm_checkpoint_tensor(c, i);
        printf("%s %s ", t->name, sfm_wtype_name(t->type));
        for (int d = 0; d < t->ndim; d++) printf("%s%lld", d ? "," : "", (long long)t->shape[d]);
        printf("\n");
    }
    int rc = 0;
    if (argc == 4) {
        const sfm_tensor *t = sfm_checkpoint_find(c, argv[2]);
        FILE *f = t ? fopen(argv[3], "wb") : NULL;
        if (!f || fwrite(t->data, 1, (size_t)t->nbytes, f) != (size_t)t->nbytes) {
            fprintf(stderr, "cannot write %s to %s\n", argv[2], argv[3]);
            rc = 1;
        }
        if (f) fclose(f);
    }
    sfm_checkpoint_close(c);
    return rc;
}
