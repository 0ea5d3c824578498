// Prints the daemon's CLAIM or FINISH script (argv[1]: "claim" or "finish"), for the Python
// stand-in of bench/batch_bench.py (bench/standin_cpu.py says how).
#include <cstdio>
#include <string>

#include "scheduler/redis/scripts.h"

int main(int, char** argv) {
  std::string w = argv[1] ? argv[1] : "";
  fputs(w == "claim" ? sandpool::kClaimScript : sandpool::kFinishScript, stdout);
}
