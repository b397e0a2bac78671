#pragma once
// The activation memory of one pipeline rank, shared by its model chunks. Slot k of every chunk
// is the same memory: the pipeline executor hands a free slot to each (chunk, micro-batch) for
// as long as it needs one, so a rank holds as many micro-batches' activations as its schedule
// keeps in flight at once, whichever chunks they belong to (pipeline_schedule's
// activation_slots), instead of every chunk holding the busiest chunk's count.
//
// Within a slot, each chunk carves its tensors into named segments ("block 0", "residual",
// "head"). Chunks with as many blocks ask for the same segments; the first to ask sizes one
// (the first chunk, built first, holds the embedding's extra tensors). A later, larger request
// gets its own buffer.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kintsugi/model/carver.hpp"

namespace kintsugi {

class ActivationPool {
 public:
  ActivationPool(Backend& backend, int slots) : backend_(backend), slots_(slots) {}
  int slots() const { return slots_; }

  // Runs `layout` (as carve() does) on slot `slot`'s segment `segment`.
  template <class Layout>
  void carve(int slot, const std::string& segment, Layout&& layout) {
    Carver measure;
    layout(measure);
    auto [it, fresh] = segments_.try_emplace({slot, segment});
    if (fresh || it->second.size() < measure.used()) {
      if (!fresh) outgrown_.push_back(std::move(it->second));  // earlier views stay valid
      it->second = backend_.allocate(MemoryKind::activations, measure.used());
    }
    Carver real(it->second.data(), it->second.device());
    layout(real);
  }

 private:
  Backend& backend_;
  int slots_;
  std::map<std::pair<int, std::string>, Buffer> segments_;
  std::vector<Buffer> outgrown_;
};

}  // namespace kintsugi
