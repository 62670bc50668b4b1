/*
 * A client of ABI version 1, compiled against the frozen header next to this
 * file (not the current one). Every versioned struct it passes ends right
 * before a page with no access, so a library that touched a byte past the
 * caller's struct_size would fault instead of silently passing.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include <dstrain/dstrain.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "old_client.h"

/* Two pages: the second has no access; returns `size` bytes ending at it. */
static void *BeforeGuardPage(size_t size, void **mapping, size_t *mapping_size) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char *p = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  if (mprotect(p + page, page, PROT_NONE) != 0) {
    munmap(p, 2 * page);
    return NULL;
  }
  *mapping = p;
  *mapping_size = 2 * page;
  return p + page - size;
}

void dst_abi_v1_sizes(size_t sizes[4]) {
  sizes[0] = sizeof(dst_engine_options_t);
  sizes[1] = sizeof(dst_batch_t);
  sizes[2] = sizeof(dst_engine_info_t);
  sizes[3] = sizeof(dst_tensor_info_t);
}

static int Failed(char *message, size_t size, const char *what, dst_status_t st) {
  snprintf(message, size, "%s: %s: %s", what, dst_status_string(st), dst_last_error());
  return 1;
}

int dst_abi_v1_client_run(const char *config_json, const char *model_json,
                          struct dst_abi_v1_result *result, char *message, size_t message_size) {
  void *maps[4] = {NULL, NULL, NULL, NULL};
  size_t map_sizes[4] = {0, 0, 0, 0};
  const dst_engine_options_t options_init = DST_ENGINE_OPTIONS_INIT;
  const dst_batch_t batch_init = DST_BATCH_INIT;
  dst_engine_options_t *options = BeforeGuardPage(sizeof *options, &maps[0], &map_sizes[0]);
  dst_batch_t *batch = BeforeGuardPage(sizeof *batch, &maps[1], &map_sizes[1]);
  dst_engine_info_t *info = BeforeGuardPage(sizeof *info, &maps[2], &map_sizes[2]);
  dst_tensor_info_t *tensor = BeforeGuardPage(sizeof *tensor, &maps[3], &map_sizes[3]);
  dst_engine_t *engine = NULL;
  int32_t tokens[2 * 16], targets[2 * 16];
  dst_status_t st;
  int rc = 0, i;

  message[0] = '\0';
  if (!options || !batch || !info || !tensor) {
    snprintf(message, message_size, "mmap failed");
    rc = 1;
    goto done;
  }
  *options = options_init;
  options->config_json = config_json;
  options->model_json = model_json;
  if ((st = dst_engine_create(&engine, options)) != DST_OK) {
    rc = Failed(message, message_size, "dst_engine_create", st);
    goto done;
  }
  memset(info, 0xab, sizeof *info);
  info->struct_size = sizeof *info;
  if ((st = dst_engine_get_info(engine, info)) != DST_OK) {
    rc = Failed(message, message_size, "dst_engine_get_info", st);
    goto done;
  }
  result->info_struct_size = info->struct_size;
  result->num_parameters = info->num_parameters;
  result->output_dim = info->output_dim;

  for (i = 0; i < 2 * 16; ++i) {
    tokens[i] = (i * 3) % 256;
    targets[i] = (i * 3 + 3) % 256;
  }
  *batch = batch_init;
  batch->n_samples = 2;
  batch->seq_len = 16;
  batch->tokens = tokens;
  batch->tokens_count = 2 * 16;
  batch->targets = targets;
  batch->targets_count = 2 * 16;
  if ((st = dst_engine_train_batch(engine, batch, &result->loss)) != DST_OK) {
    rc = Failed(message, message_size, "dst_engine_train_batch", st);
    goto done;
  }

  memset(tensor, 0xab, sizeof *tensor);
  tensor->struct_size = sizeof *tensor;
  if ((st = dst_engine_param_info(engine, 0, tensor)) != DST_OK) {
    rc = Failed(message, message_size, "dst_engine_param_info", st);
    goto done;
  }
  result->tensor_struct_size = tensor->struct_size;
  result->first_param_numel = tensor->numel;
  snprintf(result->first_param_name, sizeof result->first_param_name, "%s", tensor->name);

done:
  dst_engine_destroy(engine);
  for (i = 0; i < 4; ++i)
    if (maps[i]) munmap(maps[i], map_sizes[i]);
  return rc;
}
