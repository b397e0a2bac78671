#pragma once
// Scratch state (caches, buffers) for const methods called from many threads at once: each call
// borrows a workspace nobody else holds and returns it when done, so threads never share or wait
// on a cache; the pool grows to the number of concurrent callers.
#include <memory>
#include <mutex>
#include <vector>

namespace kintsugi::data {

template <class Workspace>
class WorkspacePool {
 public:
  class Lease {
   public:
    Lease(WorkspacePool& pool, std::unique_ptr<Workspace> w) : pool_(pool), w_(std::move(w)) {}
    ~Lease() { pool_.give_back(std::move(w_)); }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Workspace& operator*() const { return *w_; }
    Workspace* operator->() const { return w_.get(); }

   private:
    WorkspacePool& pool_;
    std::unique_ptr<Workspace> w_;
  };

  Lease borrow() {
    std::unique_ptr<Workspace> w;
    {
      std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        w = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (!w) w = std::make_unique<Workspace>();
    return Lease(*this, std::move(w));
  }

 private:
  void give_back(std::unique_ptr<Workspace> w) {
    std::lock_guard lock(mutex_);
    free_.push_back(std::move(w));
  }
  std::mutex mutex_;
  std::vector<std::unique_ptr<Workspace>> free_;
};

}  // namespace kintsugi::data
