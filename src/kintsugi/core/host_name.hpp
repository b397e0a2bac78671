#pragma once
// This machine's name, for identities written into files (output locks, energy counters, event
// file names).

#include <string>

namespace kintsugi {

// gethostname(), or "localhost" where the system gives none.
std::string host_name();

}  // namespace kintsugi
