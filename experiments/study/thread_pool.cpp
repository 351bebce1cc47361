// batchsim — parallel jobs of a study (see thread_pool.h).
#include "experiments/study/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace batchsim {

int threads_for(int jobs, std::size_t count) { return std::max(1, std::min<int>(jobs, static_cast<int>(count))); }

void for_each_index(std::size_t count, int threads, const std::function<void(std::size_t)>& body) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::exception_ptr error;
  auto work = [&] {
    while (!stop) {
      const std::size_t i = next++;
      if (i >= count) return;
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
        stop = true;
      }
    }
  };
  {
    std::vector<std::jthread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace batchsim
