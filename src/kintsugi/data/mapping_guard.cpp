#include "kintsugi/data/mapping_guard.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace kintsugi::data {

namespace {

// A fixed table the signal handler can read without locks or allocation: a slot is published
// by storing `begin` last (release) and retired by clearing it first.
struct Slot {
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  char label[480] = {};
};
constexpr int kSlots = 32;  // a run maps two token files; tests and tools a few more
Slot g_slots[kSlots];
std::mutex g_register;  // between threads registering; the handler never takes it

void say(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

extern "C" void on_bus_error(int signal, siginfo_t* info, void*) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (const Slot& s : g_slots) {
    const std::uintptr_t begin = s.begin.load(std::memory_order_acquire);
    if (begin == 0 || address < begin || address >= s.end.load(std::memory_order_relaxed))
      continue;
    say("kintsugi: error: ");
    say(s.label);
    say(" changed while this run was reading it (it is now shorter than when it was opened): "
        "restore it and resume from the last checkpoint\n");
    ::_exit(1);
  }
  // Not one of ours: the default action (a core dump where enabled).
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void install_once() {
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_sigaction = on_bus_error;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, nullptr);
    return true;
  }();
  (void)installed;
}

}  // namespace

void guard_mapping(const void* begin, std::size_t bytes, const std::string& label) {
  install_once();
  std::lock_guard<std::mutex> lock(g_register);
  for (Slot& s : g_slots) {
    if (s.begin.load(std::memory_order_relaxed) != 0) continue;
    std::strncpy(s.label, label.c_str(), sizeof(s.label) - 1);
    s.label[sizeof(s.label) - 1] = '\0';
    s.end.store(reinterpret_cast<std::uintptr_t>(begin) + bytes, std::memory_order_relaxed);
    s.begin.store(reinterpret_cast<std::uintptr_t>(begin), std::memory_order_release);
    return;
  }
  // More mappings than slots: this one is read unguarded (a bus error ends the process as
  // before, only without the file's name).
}

void unguard_mapping(const void* begin) {
  std::lock_guard<std::mutex> lock(g_register);
  for (Slot& s : g_slots)
    if (s.begin.load(std::memory_order_relaxed) == reinterpret_cast<std::uintptr_t>(begin))
      s.begin.store(0, std::memory_order_release);
}

}  // namespace kintsugi::data
