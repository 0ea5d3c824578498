// Prints the daemon's CLAIM or FINISH script (argv[1]: "claim" or "finish"), for the Python
// stand-in of bench/batch_bench.py (built as sandpool_dump_scripts; bench/batch.sh and
// bench/standin_cpu.py use it).
#include <cstdio>
#include <string>

#include "scheduler/redis/scripts.h"

int main(int, char** argv) {
  std::string w = argv[1] ? argv[1] : "";
  fputs(w == "claim" ? sandpool::kClaimScript : sandpool::kFinishScript, stdout);
}
