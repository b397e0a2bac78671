#pragma once
// Token files and datasets are read through memory mappings (MappedFile). A file that shrinks
// while mapped (truncated by another process) turns the next read of its lost pages into
// SIGBUS, which would end the run with no word on why. Mappings registered here are named
// instead: the signal handler prints which file changed and ends the process with status 1.
// Nothing is half-written by that: a checkpoint becomes visible only when complete, so the last
// one stays good.
#include <cstddef>
#include <string>

namespace kintsugi::data {

// Registers [begin, begin + bytes) as the mapping of `label` ("token file data/x.bin"; installs
// the handler once).
void guard_mapping(const void* begin, std::size_t bytes, const std::string& label);
// Before the mapping goes away.
void unguard_mapping(const void* begin);

}  // namespace kintsugi::data
