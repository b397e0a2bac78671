#include "kintsugi/backend/cuda/gemm_algorithms.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>

#include "kintsugi/core/cache_dir.hpp"

namespace kintsugi::cuda {

namespace fs = std::filesystem;

namespace {

std::string to_hex(const AlgorithmBytes& a) {
  std::string s;
  char word[17];
  for (std::uint64_t v : a) {
    std::snprintf(word, sizeof(word), "%016llx", static_cast<unsigned long long>(v));
    s += word;
  }
  return s;
}

std::optional<AlgorithmBytes> from_hex(const std::string& s) {
  AlgorithmBytes a{};
  if (s.size() != 16 * a.size()) return std::nullopt;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return std::nullopt;
    a[i / 16] = a[i / 16] << 4 | static_cast<std::uint64_t>(d);
  }
  return a;
}

nlohmann::json load() {
  std::ifstream in(AlgorithmStore::file());
  if (in) try {
      auto j = nlohmann::json::parse(in);
      if (j.is_object() && j.contains("algorithms") && j["algorithms"].is_array()) return j;
    } catch (const std::exception&) {
      // A damaged cache is only a cache: tune again.
    }
  return {{"algorithms", nlohmann::json::array()}};
}

// What this process chose or read, by AlgorithmStore::key: its GEMMs agree whatever the file.
std::mutex process_mutex;
std::map<std::string, AlgorithmBytes>& process_choices() {
  static std::map<std::string, AlgorithmBytes> choices;
  return choices;
}

// An exclusive lock on the store (a lock file beside it) while it lives, so that reading,
// choosing and writing are one step between processes. Best effort: without a writable cache
// directory there is no lock and nothing to share.
class FileLock {
 public:
  FileLock() {
    std::error_code ec;
    fs::create_directories(AlgorithmStore::file().parent_path(), ec);
    fd_ = ::open((AlgorithmStore::file().string() + ".lock").c_str(), O_RDWR | O_CREAT, 0644);
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~FileLock() {
    if (fd_ < 0) return;
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

AlgorithmStore::AlgorithmStore(std::string gpu, int multiprocessors, std::int64_t cublaslt_version)
    : gpu_(std::move(gpu)), multiprocessors_(multiprocessors), version_(cublaslt_version) {}

fs::path AlgorithmStore::file() { return cache_file("gemm-algorithms.json"); }

// The file is part of the key, so that a process pointed at another cache directory (tests)
// starts from what that one holds.
std::string AlgorithmStore::key(const std::string& shape) const {
  return file().string() + "\n" + gpu_ + "\n" + std::to_string(multiprocessors_) + "\n" +
         std::to_string(version_) + "\n" + shape;
}

namespace {
bool matches(const nlohmann::json& e, const std::string& gpu, int multiprocessors,
             std::int64_t version, const std::string& shape) {
  return e.is_object() && e.value("gpu", "") == gpu &&
         e.value("multiprocessors", -1) == multiprocessors &&
         e.value("cublaslt", std::int64_t{-1}) == version && e.value("shape", "") == shape;
}
}  // namespace

std::optional<AlgorithmBytes> AlgorithmStore::find(const std::string& shape) const {
  const std::lock_guard<std::mutex> guard(process_mutex);
  auto& choices = process_choices();
  if (const auto it = choices.find(key(shape)); it != choices.end()) return it->second;
  const nlohmann::json j = load();
  for (const auto& e : j["algorithms"])
    if (matches(e, gpu_, multiprocessors_, version_, shape))
      if (const auto algo = from_hex(e.value("algo", ""))) {
        choices[key(shape)] = *algo;
        return algo;
      }
  return std::nullopt;
}

AlgorithmBytes AlgorithmStore::store(const std::string& shape, const TunedAlgorithm& tuned,
                                     const std::optional<AlgorithmBytes>& stale) const {
  const std::lock_guard<std::mutex> guard(process_mutex);
  const FileLock lock;
  auto& choices = process_choices();
  if (const auto it = choices.find(key(shape)); it != choices.end() && it->second != stale)
    return it->second;  // another GEMM of this process was first
  nlohmann::json j = load();
  auto& all = j["algorithms"];
  for (auto it = all.begin(); it != all.end(); ++it) {
    if (!matches(*it, gpu_, multiprocessors_, version_, shape)) continue;
    const auto stored = from_hex(it->value("algo", ""));
    if (stored && stored != stale) {  // another process was first: its choice is the one
      choices[key(shape)] = *stored;
      return *stored;
    }
    all.erase(it);
    break;
  }
  all.push_back({{"gpu", gpu_},
                 {"multiprocessors", multiprocessors_},
                 {"cublaslt", version_},
                 {"shape", shape},
                 {"algo", to_hex(tuned.algo)},
                 {"candidates", tuned.candidates},
                 {"chosen", tuned.chosen},
                 {"ms", tuned.ms},
                 {"first_ms", tuned.first_ms},
                 {"tuning_ms", tuned.tuning_ms}});
  const fs::path tmp = file().string() + ".tmp";
  std::ofstream(tmp) << j.dump(1) << "\n";
  std::error_code ec;
  fs::rename(tmp, file(), ec);  // best effort, as the cache directory's other files
  choices[key(shape)] = tuned.algo;
  return tuned.algo;
}

}  // namespace kintsugi::cuda
