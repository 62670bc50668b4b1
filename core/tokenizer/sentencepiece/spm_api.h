/* The SentencePiece plugin's table (libdstrain_sentencepiece.so): plain C,
 * grows at the end. libsentencepiece lives in the plugin so that a training
 * process never loads it (its thread-local storage would take from the
 * fixed stacks of the metrics server's threads). */
#ifndef DSTRAIN_SPM_API_H
#define DSTRAIN_SPM_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct DstSpmApi {
  int version; /* 1 */
  /* A loaded model, or NULL with a message in err[0, err_len). */
  void *(*open)(const char *path, char *err, size_t err_len);
  void (*close)(void *model);
  int32_t (*piece_size)(void *model);
  int32_t (*bos_id)(void *model);
  int32_t (*eos_id)(void *model);
  /* The ids of text[0, len) in *out (the calling thread's buffer, valid
   * until its next encode); returns their count. */
  int64_t (*encode)(void *model, const char *text, size_t len, const int32_t **out);
  /* The text of ids[0, n) in *out (the calling thread's, NUL-terminated,
   * valid until its next decode); returns its length. */
  int64_t (*decode)(void *model, const int32_t *ids, size_t n, const char **out);
} DstSpmApi;

/* The plugin's entry point. */
typedef const DstSpmApi *(*DstSpmEntry)(void);

#ifdef __cplusplus
}
#endif

#endif /* DSTRAIN_SPM_API_H */
