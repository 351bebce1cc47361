#include "sim/event_queue.h"

namespace batchsim {

void EventQueue::push(SimTime time, EventKind kind, int64_t payload) {
  heap_.push(Event{time, next_seq_++, kind, payload});
}

Event EventQueue::pop() {
  Event e = heap_.top();
  heap_.pop();
  return e;
}

}  // namespace batchsim
