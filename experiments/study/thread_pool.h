// batchsim — the one way studies run their independent simulations in parallel.
//
// `compare` and `plan` each have a list of independent jobs (a sweep's runs, a plan's
// candidates). for_each_index runs body(i) for every i in [0, count) on `threads` threads, the
// caller's among them, each taking the next index in order (an atomic counter), so that the
// order of what they report follows completion but every index runs exactly once. A body that
// throws stops the others from taking new indices; once every thread has returned, the first
// exception thrown is rethrown to the caller. Bodies handle the failures they expect (a
// candidate that cannot run) themselves; what escapes is a bug.
//
// Thread safety: body is called concurrently; what it shares it must lock itself.
#pragma once

#include <cstddef>
#include <functional>

namespace batchsim {

// The threads for `jobs` requested and `count` jobs: at least 1, at most count.
int threads_for(int jobs, std::size_t count);

void for_each_index(std::size_t count, int threads, const std::function<void(std::size_t)>& body);

}  // namespace batchsim
