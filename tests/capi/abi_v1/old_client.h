/* The interface between old_client.c (compiled against the frozen ABI v1
 * header) and the C++ test that runs it; uses no dstrain type. */
#ifndef DSTRAIN_TESTS_ABI_V1_OLD_CLIENT_H
#define DSTRAIN_TESTS_ABI_V1_OLD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct dst_abi_v1_result {
  size_t info_struct_size;   /* dst_engine_info_t.struct_size after get_info */
  size_t tensor_struct_size; /* dst_tensor_info_t.struct_size after param_info */
  int64_t num_parameters;
  int64_t output_dim;
  int64_t first_param_numel;
  char first_param_name[128];
  float loss; /* of one train_batch */
};

/* sizeof of the v1 dst_engine_options_t, dst_batch_t, dst_engine_info_t and
 * dst_tensor_info_t, as the frozen header lays them out. */
void dst_abi_v1_sizes(size_t sizes[4]);

/* Creates an engine, reads its info, trains one GPT step (2 samples of 16
 * tokens) and describes parameter 0, through v1 structs placed before a
 * guard page. 0 on success; otherwise `message` says what failed. */
int dst_abi_v1_client_run(const char *config_json, const char *model_json,
                          struct dst_abi_v1_result *result, char *message, size_t message_size);

#ifdef __cplusplus
}
#endif

#endif
