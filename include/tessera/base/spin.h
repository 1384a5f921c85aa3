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

}  // namespace tessera
