// spin_until: wait briefly for a condition without sleeping in the kernel.
//
// Worker and queue threads spin a few microseconds before they block on a
// condition variable, because a futex wake-up costs more than most launches
// (several microseconds on a VM). While spinning they yield the core, so a
// runnable thread (the host thread dispatching the next op, on a machine with
// fewer cores than Tessera threads) is never starved by a spinner.
#pragma once

#include <chrono>
#include <thread>

namespace tessera {

template <class Pred>
bool spin_until(Pred pred, std::chrono::microseconds budget) {
  const auto until = std::chrono::steady_clock::now() + budget;
  for (int i = 0; !pred(); ++i) {
    if (std::chrono::steady_clock::now() >= until) return false;
    if (i % 16 == 15)
      std::this_thread::yield();
    else
      __builtin_ia32_pause();
  }
  return true;
}

// Takes a std::unique_lock's mutex, spinning on try_lock first. For mutexes
// held a few instructions at a time: a thread that blocks on a held
// std::mutex sleeps in a futex, and its wake-up costs microseconds on a VM
// (a pool worker that saw a launch and then blocked on the caller's lock
// joined it 2-3 us late).
template <class Lock>
void lock_spinning(Lock& lock, std::chrono::microseconds budget = std::chrono::microseconds(10)) {
  if (!spin_until([&] { return lock.try_lock(); }, budget)) lock.lock();
}

}  // namespace tessera
