/*
 * abort_on_signal: SIGINT or SIGTERM stops training within a second, also while this rank is
 * blocked in a collective on a peer that will never answer. The pattern for any program that
 * embeds dstrain: the signal handler only posts a semaphore (sem_post is async-signal-safe);
 * a watchdog thread waiting on it calls dst_engine_abort, which makes the running call return
 * DST_ERR_ABORTED and then frees the engine. The handler never calls into dstrain itself.
 *
 *   abort_on_signal [--steps N] [--stall-after K] [--stall-seconds S]
 *
 *   --steps N          optimizer steps (default 1000)
 *   --stall-after K    after K steps, stop calling for S seconds (a peer that stopped answering),
 *                      then try one more step and report what it returned
 *   --stall-seconds S  (default 5)
 *
 * Run it as the ranks of a job (dstrain launch, or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT).
 * Build: cc abort_on_signal.c -I capi/include -L build -ldstrain -lpthread -Wl,-rpath,build
 */
#define _POSIX_C_SOURCE 200809L
#include <dstrain/dstrain.h>

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { kSeqLen = 16, kVocab = 256 };

static const char *kModel =
    "{\"type\": \"gpt\", \"vocab_size\": 256, \"n_ctx\": 16, \"n_layer\": 1, \"n_head\": 2,"
    " \"d_model\": 32, \"seed\": 1}";
static const char *kConfig =
    "{\"train_batch_size\": 12, \"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 1e-3}},"
    " \"dstrain\": {\"num_threads\": 1, \"comm_timeout_seconds\": 60}}";

static sem_t g_stop;                   /* posted by the signal handler */
static volatile sig_atomic_t g_signal; /* which signal arrived */

static void on_signal(int sig) {
  g_signal = sig;
  sem_post(&g_stop); /* async-signal-safe; nothing else happens in the handler */
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static dst_engine_t *g_engine;
static double g_abort_at; /* when the watchdog called dst_engine_abort */

static void *watchdog(void *arg) {
  (void)arg;
  while (sem_wait(&g_stop) != 0 && errno == EINTR) {
  }
  g_abort_at = now_seconds();
  printf("signal %d: aborting\n", (int)g_signal);
  fflush(stdout);
  dst_engine_abort(g_engine); /* returns once the running call has returned */
  return NULL;
}

static long arg_long(int argc, char **argv, const char *name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (strcmp(argv[i], name) == 0) return strtol(argv[i + 1], NULL, 10);
  return fallback;
}

int main(int argc, char **argv) {
  const long steps = arg_long(argc, argv, "--steps", 1000);
  const long stall_after = arg_long(argc, argv, "--stall-after", -1);
  const long stall_seconds = arg_long(argc, argv, "--stall-seconds", 5);

  if (sem_init(&g_stop, 0, 0) != 0) return 1;
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, NULL);
  sigaction(SIGTERM, &action, NULL);

  dst_engine_options_t opts;
  dst_engine_options_default(&opts);
  opts.config_json = kConfig;
  opts.model_json = kModel;
  dst_status_t st = dst_engine_create(&g_engine, &opts);
  if (st != DST_OK) {
    fprintf(stderr, "abort_on_signal: dst_engine_create: %s\n", dst_last_error());
    return 1;
  }
  dst_engine_info_t info;
  info.struct_size = sizeof info;
  dst_engine_get_info(g_engine, &info);
  const size_t n = (size_t)info.train_batch_size / (size_t)info.dp_size;
  int32_t *tokens = calloc(n * kSeqLen, sizeof(int32_t));
  int32_t *targets = calloc(n * kSeqLen, sizeof(int32_t));
  if (!tokens || !targets) return 1;
  for (size_t i = 0; i < n * kSeqLen; ++i) {
    tokens[i] = (int32_t)((i * 7 + (size_t)info.rank) % kVocab);
    targets[i] = (int32_t)((i * 7 + 1 + (size_t)info.rank) % kVocab);
  }
  dst_batch_t batch;
  dst_batch_default(&batch);
  batch.n_samples = n;
  batch.seq_len = kSeqLen;
  batch.tokens = tokens;
  batch.tokens_count = n * kSeqLen;
  batch.targets = targets;
  batch.targets_count = n * kSeqLen;

  pthread_t thread;
  if (pthread_create(&thread, NULL, watchdog, NULL) != 0) return 1;

  int code = 0;
  for (long step = 0; step < steps; ++step) {
    if (step == stall_after) {
      printf("rank %lld: stalling for %ld s\n", (long long)info.rank, stall_seconds);
      fflush(stdout);
      sleep((unsigned)stall_seconds);
    }
    printf("rank %lld: step %ld\n", (long long)info.rank, step);
    fflush(stdout);
    float loss = 0.0f;
    st = dst_engine_train_batch(g_engine, &batch, &loss);
    if (st == DST_ERR_ABORTED) {
      printf("rank %lld: step %ld returned DST_ERR_ABORTED %.0f ms after the abort: %s\n",
             (long long)info.rank, step, (now_seconds() - g_abort_at) * 1e3, dst_last_error());
      code = 130;
      break;
    }
    if (st != DST_OK) {
      printf("rank %lld: step %ld failed: %s: %s\n", (long long)info.rank, step,
             dst_status_string(st), dst_last_error());
      code = 1;
      break;
    }
    if (step == stall_after) break; /* the peer's fate is reported; nothing more to show */
  }
  if (code == 130) {
    pthread_join(thread, NULL); /* the abort has freed the engine */
    /* The handle is dead, never reused: destroying it again does nothing. */
    dst_engine_destroy(g_engine);
  } else {
    dst_engine_destroy(g_engine);
  }
  printf("rank %lld: exit %d\n", (long long)info.rank, code);
  free(tokens);
  free(targets);
  return code;
}
