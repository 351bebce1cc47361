// batchsim — the command-line tool.
//
//   batchsim run      one policy on one workload
//   batchsim compare  an experiment file, or several policies on the same request sequence
//   batchsim merge    join the results folders of sharded compares
//   batchsim list     models | gpus | policies
//   batchsim bench    simulated requests per wall-second (speed of the simulator itself)
//
// Exit codes: 0 success, 2 bad input (the message names the option, file or line),
// 3 internal error (a bug: please report it).
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>
#if BATCHSIM_WITH_MIMALLOC
#include <mimalloc.h>
#endif

#include "experiments/cli/cli.h"
#include "hwmodel/base/error.h"

#if BATCHSIM_WITH_MIMALLOC
// A run touches its memory once: an exact run of the Azure conversation trace writes ~20 MB of
// records, samples and workload, 5,000 first-touch page faults on 4 KiB pages. On a virtual
// machine each fault is a trap to the hypervisor (~5 us on this project's VM), which made them
// 30% of a whole run. On 2 MiB pages (transparent huge pages that mimalloc asks for with
// madvise) the same run takes ~240 faults. mimalloc commits a new thread's first segment lazily
// and on small pages (eager_commit_delay), which made each `compare --jobs` worker fault on
// 4 KiB pages again: jobs 2 ran 1.17x faster than jobs 1 with the delay, 1.64x without.
// Set from .preinit_array, which runs before the shared libraries' initializers (libstdc++'s
// makes the first allocation, and with it the first segment), as defaults:
// MIMALLOC_LARGE_OS_PAGES=0 or MIMALLOC_EAGER_COMMIT_DELAY=1 still override them. The results
// do not depend on the allocator.
static void tune_allocator(int, char**, char**) {
  mi_option_set_enabled_default(mi_option_large_os_pages, true);
  mi_option_set_default(mi_option_eager_commit_delay, 0);
}
__attribute__((section(".preinit_array"), used)) static void (*const preinit_tune_allocator)(int, char**,
                                                                                             char**) = &tune_allocator;
#endif

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return batchsim::cli_main(args, std::cout, std::cerr);
  } catch (const batchsim::UserError& e) {
    std::cerr << "batchsim: error: " << e.what() << '\n';
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "batchsim: error: out of memory (try fewer requests or a shorter trace)\n";
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "batchsim: internal error: " << e.what() << '\n';
    return 3;
  }
}
