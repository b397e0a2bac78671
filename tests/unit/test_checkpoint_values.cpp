// Training state no run could continue from (weights or first moments that are not finite,
// negative second moments) is never saved, and a checkpoint holding it (written by a build
// without these checks, or edited, so that its checksums are valid) is refused when inspected,
// before anything loads, naming the tensor: a resumed run would otherwise blame train.lr.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <vector>

#include "kintsugi/backend/backend.hpp"
#include "kintsugi/checkpoint/checkpoint_dir.hpp"
#include "kintsugi/checkpoint/checkpoint_format.hpp"
#include "kintsugi/checkpoint/train_checkpoint.hpp"
#include "kintsugi/comm/launch.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/core/host_io.hpp"
#include "kintsugi/train/stage_model.hpp"
#include "support/error_of.hpp"
#include "scratch_dir.hpp"
#include "support/error_of.hpp"

namespace kintsugi {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;

RunConfig one_layer_run() {
  RunConfig c;
  c.model = model_preset("gpt-tiny");
  c.model.n_layer = 1;
  c.model.seq_len = 16;
  c.model.vocab_size = 300;
  c.train.global_batch = 2;
  c.train.micro_batch = 2;
  resolve_layout(c, 1);
  return c;
}

class CheckpointValues : public ::testing::Test {
 protected:
  CheckpointValues() {
    rank.params = model.params();
    rank.states = {&model.state(0)};
  }
  fs::path save(std::int64_t step) {
    return save_train_checkpoint(scratch / "checkpoints", config.model, {{"world", 1}},
                                 {.step = step}, rank, 0);
  }
  const RunConfig config = one_layer_run();
  MemoryTracker memory;
  std::unique_ptr<Backend> cpu = make_cpu_backend(memory);
  Tracer tracer;
  const Place place;
  StageModel model{*cpu, config, place, tracer};
  RankState rank;
  const ScratchDir scratch{"checkpoint-values"};
};

TEST_F(CheckpointValues, UnsoundStateIsNotSaved) {
  const fs::path good = save(1);
  const auto piece = model.state(0).state_pieces().at(1);
  std::vector<float> m = read_values(piece.m);
  m[3] = INFINITY;
  write_values(m.data(), piece.m);
  EXPECT_THROW(save(2), AlreadyReported);  // the message names the tensor (stderr)
  EXPECT_FALSE(fs::exists(checkpoint_path(scratch / "checkpoints", 2)));
  EXPECT_EQ(newest_checkpoint(scratch / "checkpoints"), good);  // `latest` still names step 1
}

// A checkpoint whose shard holds `bad` at element 3 of piece 1's values `q` (0 weights, 1 first
// moments, 2 second moments), with the file's and the manifest's checksums made to match.
void poison(const fs::path& dir, int q, float bad) {
  using namespace checkpoint_format;
  json manifest = json::parse(std::ifstream(dir / "manifest.json"));
  const json& piece = manifest.at("pieces").at(1);
  const fs::path shard = dir / manifest.at("files").at(0).at("name").get<std::string>();
  const auto offset = piece.at("offset").get<std::uint64_t>() +
                      (q * piece.at("count").get<std::uint64_t>() + 3) * sizeof(float);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(reinterpret_cast<const char*>(&bad), sizeof(bad));
  }
  manifest["files"][0]["xxh3"] = hex(file_checksum(shard));
  manifest[kManifestChecksum] = manifest_checksum(manifest);
  std::ofstream(dir / "manifest.json") << manifest.dump(1);
}

TEST_F(CheckpointValues, UnsoundCheckpointIsRefusedByName) {
  const std::string tensor =
      model.params().front()->entry(model.state(0).state_pieces().at(1).param).spec.name;
  const std::vector<std::pair<float, std::string>> cases = {
      {NAN, "holds nan as a weight of tensor " + tensor},
      {INFINITY, "holds inf as a first moment of tensor " + tensor},
      {-1.0f, "holds -1 as a second moment of tensor " + tensor}};
  for (int q = 0; q < 3; ++q) {
    const fs::path dir = save(q + 1);
    inspect_checkpoint(dir, config.model);  // sound as saved
    poison(dir, q, cases[q].first);
    std::string error;
    try {
      inspect_checkpoint(dir, config.model);
    } catch (const Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find(cases[q].second), std::string::npos) << error;
  }
}

// Names read from a checkpoint never lead outside it: a manifest re-signed to name a shard file
// elsewhere (a valid copy there, with its true size and checksum), or a `latest` edited to name
// a checkpoint outside the run's directory, is refused, naming the file.
TEST_F(CheckpointValues, NamesInACheckpointStayInsideIt) {
  using namespace checkpoint_format;
  const fs::path dir = save(1);
  json manifest = json::parse(std::ifstream(dir / "manifest.json"));
  const std::string shard = manifest.at("files").at(0).at("name").get<std::string>();
  fs::copy_file(dir / shard, scratch / "outside.bin");
  for (const std::string& name :
       {std::string("../../outside.bin"), (scratch / "outside.bin").string()}) {
    json edited = manifest;
    edited["files"][0]["name"] = name;
    edited[kManifestChecksum] = manifest_checksum(edited);
    std::ofstream(dir / "manifest.json") << edited.dump(1);
    EXPECT_NE(error_of([&] { inspect_checkpoint(dir, config.model); })
                  .find("manifest.json is damaged: shard file \"" + name +
                        "\" is not a file in the checkpoint's directory"),
              std::string::npos)
        << name;
  }
  std::ofstream(dir / "manifest.json") << manifest.dump(1);
  inspect_checkpoint(dir, config.model);  // as saved

  fs::create_directories(scratch / "elsewhere");
  fs::copy(dir, scratch / "elsewhere" / dir.filename(), fs::copy_options::recursive);
  std::ofstream(scratch / "checkpoints" / "latest") << "../elsewhere/" << dir.filename().string();
  const std::string error = error_of([&] { resolve_resume("auto", scratch); });
  EXPECT_NE(error.find("latest names \"../elsewhere/step-00000001\", which is not a checkpoint "
                       "directory in"),
            std::string::npos)
      << error;
}

}  // namespace
}  // namespace kintsugi
