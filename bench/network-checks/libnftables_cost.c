// Narrow and Reset of one slot (docs/design/network.md 3.2) through libnftables 1.0.6, and whether a
// buffer of several commands is one transaction (a failing last command leaves nothing applied).
//   libnftables_cost <ruleset.nft> <slots>
#include <nftables/libnftables.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static int cmp(const void* a, const void* b) { double x = *(const double*)a, y = *(const double*)b; return x < y ? -1 : x > y; }
int main(int argc, char** argv) {
  struct nft_ctx* ctx = nft_ctx_new(NFT_CTX_DEFAULT);
  nft_ctx_buffer_output(ctx); nft_ctx_buffer_error(ctx);
  if (nft_run_cmd_from_filename(ctx, argv[1]) != 0) { fprintf(stderr, "load: %s\n", nft_ctx_get_error_buffer(ctx)); return 1; }
  int n = 500;
  double* narrow = malloc(sizeof(double) * n); double* reset = malloc(sizeof(double) * n);
  const char* N = "flush set inet sandpool_ab3 jcidr7; flush set inet sandpool_ab3 jdeny7; "
                  "add element inet sandpool_ab3 jcidr7 { 198.51.100.10 . 443, 198.51.100.0/28 . 80 }; "
                  "add element inet sandpool_ab3 jdeny7 { 198.51.100.9 }; "
                  "delete element inet sandpool_ab3 mode { \"spab37\" }; add element inet sandpool_ab3 mode { \"spab37\" : jump j7 }";
  const char* R = "flush set inet sandpool_ab3 jcidr7; flush set inet sandpool_ab3 jdeny7; flush set inet sandpool_ab3 dyn7; flush set inet sandpool_ab3 dynany7; "
                  "delete element inet sandpool_ab3 mode { \"spab37\" }; add element inet sandpool_ab3 mode { \"spab37\" : jump t7 }";
  for (int i = 0; i < n; i++) {
    double t0 = now_ms();
    if (nft_run_cmd_from_buffer(ctx, N) != 0) { fprintf(stderr, "narrow: %s\n", nft_ctx_get_error_buffer(ctx)); return 1; }
    double t1 = now_ms();
    if (nft_run_cmd_from_buffer(ctx, R) != 0) { fprintf(stderr, "reset: %s\n", nft_ctx_get_error_buffer(ctx)); return 1; }
    double t2 = now_ms();
    narrow[i] = t1 - t0; reset[i] = t2 - t1;
  }
  qsort(narrow, n, sizeof(double), cmp); qsort(reset, n, sizeof(double), cmp);
  printf("slots %s, libnftables: narrow p50 %.3f p90 %.3f ms; reset p50 %.3f p90 %.3f ms\n", argv[2], narrow[n/2], narrow[n*9/10], reset[n/2], reset[n*9/10]);
  /* a failing transaction leaves nothing applied */
  const char* BAD = "flush set inet sandpool_ab3 jcidr7; add element inet sandpool_ab3 jcidr7 { 198.51.100.10 . 443 }; add element inet sandpool_ab3 nosuchset { 1.2.3.4 }";
  int rc = nft_run_cmd_from_buffer(ctx, BAD);
  nft_run_cmd_from_buffer(ctx, "list set inet sandpool_ab3 jcidr7");
  const char* out = nft_ctx_get_output_buffer(ctx);
  printf("bad batch rc=%d; jcidr7 after it has 198.51.100.10: %s\n", rc, strstr(out, "198.51.100.10") ? "yes (NOT atomic)" : "no (atomic)");
  nft_ctx_free(ctx);
  return 0;
}
