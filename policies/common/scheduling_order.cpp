#include "policies/common/scheduling_order.h"

namespace batchsim {

std::string_view scheduling_policy_name(SchedulingPolicy policy) {
  switch (policy) {
    case SchedulingPolicy::fcfs:
      return "fcfs";
    case SchedulingPolicy::priority:
      return "priority";
    case SchedulingPolicy::sjf:
      return "sjf";
  }
  return "?";
}

RequestRanking::RequestRanking(SchedulingPolicy policy, JobLength sjf_length, const Workload& requests) {
  if (policy == SchedulingPolicy::fcfs) return;
  requests_ = &requests;
  by_priority_ = policy == SchedulingPolicy::priority;
  by_prompt_ = sjf_length == JobLength::prompt;
}

WaitingQueue::WaitingQueue(const RequestRanking* ranking)
    : ranking_(ranking != nullptr && ranking->ranked() ? ranking : nullptr), ranked_(ByRank{ranking_}) {}

void WaitingQueue::pop_front() {
  if (ranked()) {
    ranked_.erase(ranked_.begin());
  } else {
    fcfs_.pop_front();
  }
}

void WaitingQueue::add(RequestId id) {
  if (ranked()) {
    ranked_.insert(id);
  } else {
    fcfs_.push_back(id);
  }
}

void WaitingQueue::add_preempted(RequestId id) {
  if (ranked()) {
    ranked_.insert(id);
  } else {
    fcfs_.push_front(id);
  }
}

}  // namespace batchsim
