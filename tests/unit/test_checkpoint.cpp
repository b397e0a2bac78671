// Model checkpoints: round trip, and corrupt, truncated or mismatched files refused before any
// parameter is touched.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kintsugi/checkpoint/checkpoint_format.hpp"
#include "kintsugi/checkpoint/hf_io.hpp"
#include "kintsugi/checkpoint/model_checkpoint.hpp"
#include "kintsugi/checkpoint/safetensors.hpp"
#include "kintsugi/core/error.hpp"
#include "kintsugi/model/gpt.hpp"
#include "scratch_dir.hpp"

namespace kintsugi {
namespace {

namespace fs = std::filesystem;

ModelConfig small() {
  ModelConfig c = model_preset("gpt-tiny");
  c.n_layer = 1;
  c.d_model = 16;
  c.n_head = 2;
  c.d_ff = 64;
  c.vocab_size = 100;
  c.seq_len = 8;
  return c;
}

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    model.params().initialize(5);
    save_model(dir, small(), model.params(), 17);
  }
  std::string load_error(const ModelConfig& config) {
    GptModel other(*backend, config, DType::f32, 1, 4);
    other.params().initialize(6);
    const float before = other.params().params().as<float>()[0];
    try {
      load_model(dir, other.params());
    } catch (const Error& e) {
      EXPECT_EQ(other.params().params().as<float>()[0], before) << "half-loaded";
      return e.what();
    }
    return "";
  }
  MemoryTracker memory;
  std::unique_ptr<Backend> backend = make_cpu_backend(memory);
  GptModel model{*backend, small(), DType::f32, 1, 4};
  ScratchDir scratch{"ckpt"};
  fs::path dir = scratch.path() / "model";
};

TEST_F(Checkpoint, RoundTrip) {
  const auto info = read_model_info(dir);
  EXPECT_EQ(info.step, 17);
  EXPECT_EQ(info.config.d_model, 16);
  GptModel other(*backend, info.config, DType::f32, 1, 4);
  load_model(dir, other.params());
  const Tensor a = model.params().params(), b = other.params().params();
  for (std::int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.as<float>()[i], b.as<float>()[i]);
  // Saving again replaces the directory and leaves no temporary behind.
  save_model(dir, small(), model.params(), 18);
  EXPECT_EQ(read_model_info(dir).step, 18);
  for (const auto& e : fs::directory_iterator(dir.parent_path()))
    EXPECT_EQ(e.path().filename().string().find(dir.filename().string() + "."), std::string::npos);
}

TEST_F(Checkpoint, CorruptDataIsRefused) {
  {
    std::fstream f(dir / "params.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x7f');
  }
  EXPECT_NE(load_error(small()).find("checksum"), std::string::npos);
}

TEST_F(Checkpoint, TruncatedDataIsRefused) {
  fs::resize_file(dir / "params.bin", fs::file_size(dir / "params.bin") - 4);
  EXPECT_NE(load_error(small()).find("truncated"), std::string::npos);
}

TEST_F(Checkpoint, DifferentModelIsRefused) {
  ModelConfig wider = small();
  wider.d_ff = 32;
  EXPECT_NE(load_error(wider).find("shape"), std::string::npos);
  ModelConfig deeper = small();
  deeper.n_layer = 2;
  EXPECT_NE(load_error(deeper).find("different model"), std::string::npos);
}

TEST_F(Checkpoint, MissingManifestIsRefused) {
  fs::remove(dir / "manifest.json");
  EXPECT_THROW(read_model_info(dir), Error);
}

// The manifest of a saved model is checked before any tensor is read: an edited offset or shape
// would make export and eval read other tensors' bytes. Each edit is refused by load_model
// (generate) and read_model_tensors (export, eval) with a line naming the manifest.
class EditedManifest : public Checkpoint {
 protected:
  nlohmann::json manifest() const {
    return nlohmann::json::parse(std::ifstream(dir / "manifest.json"));
  }
  void write(const nlohmann::json& m) const { std::ofstream(dir / "manifest.json") << m.dump(2); }
  // Both readers' errors (empty: it was read).
  std::pair<std::string, std::string> errors() {
    std::string tensors;
    try {
      read_model_tensors(dir);
    } catch (const Error& e) {
      tensors = e.what();
    }
    return {load_error(small()), tensors};
  }
  void expect_refused(const std::string& expected) {
    const auto [load, tensors] = errors();
    for (const std::string& e : {load, tensors}) {
      EXPECT_NE(e.find((dir / "manifest.json").string()), std::string::npos) << e;
      EXPECT_NE(e.find(expected), std::string::npos) << e;
    }
  }
  // The manifest as an older kintsugi wrote it: version 1, no checksum.
  static nlohmann::json unsigned_v1(nlohmann::json m) {
    m["version"] = 1;
    m.erase("manifest_xxh3");
    return m;
  }
};

TEST_F(EditedManifest, OffsetIsRefused) {
  auto m = manifest();
  m["tensors"][1]["offset"] = m["tensors"][0]["offset"];  // the second tensor reads the first's
  write(m);
  expect_refused("tensor " + m["tensors"][1]["name"].get<std::string>() + " starts at byte 0");
  write(unsigned_v1(m));  // an old manifest gets the same checks
  expect_refused("starts at byte 0");
}

TEST_F(EditedManifest, ShapeIsRefused) {
  auto m = manifest();
  const std::string name = m["tensors"][0]["name"].get<std::string>();
  auto shape = m["tensors"][0]["shape"];
  std::swap(shape[0], shape[1]);  // same bytes, another shape
  m["tensors"][0]["shape"] = shape;
  write(m);
  expect_refused("tensor " + name + " has shape " + shape.dump() + ", but its model");
  write(unsigned_v1(m));
  expect_refused("has shape");
}

TEST_F(EditedManifest, BytesPastTheDataAreRefused) {
  auto m = manifest();
  m["data_bytes"] = m["data_bytes"].get<std::uint64_t>() + 400;
  write(m);
  expect_refused("its tensors take");
}

TEST_F(EditedManifest, EditWithinRangeIsCaughtByTheChecksum) {
  auto m = manifest();
  ASSERT_EQ(m["version"], 2);
  ASSERT_TRUE(m["manifest_xxh3"].is_string());
  m["step"] = 99;
  write(m);
  expect_refused("is corrupt or was edited: its checksum");
  m.erase("manifest_xxh3");
  write(m);
  expect_refused("its checksum manifest_xxh3 is missing");
}

// Old model directories (version 1, no checksum) are read after the structural checks, with a
// warning.
TEST_F(EditedManifest, OldManifestWithoutChecksumIsRead) {
  write(unsigned_v1(manifest()));
  const auto [load, tensors] = errors();
  EXPECT_EQ(load, "");
  EXPECT_EQ(tensors, "");
  EXPECT_EQ(read_model_info(dir).step, 17);
}

// The data file a manifest names is a file of the model's directory: an edited manifest that
// names one elsewhere (a valid copy, same size and checksum) is refused by name, for load and
// export alike.
TEST_F(Checkpoint, DataFileOutsideTheDirectoryIsRefused) {
  fs::copy_file(dir / "params.bin", scratch.path() / "outside.bin");
  nlohmann::json manifest = nlohmann::json::parse(std::ifstream(dir / "manifest.json"));
  manifest["data_file"] = "../outside.bin";
  std::ofstream(dir / "manifest.json") << manifest.dump(2);
  const std::string expected = "data file \"../outside.bin\" is not a file in the model's directory";
  EXPECT_NE(load_error(small()).find(expected), std::string::npos) << load_error(small());
  try {
    read_model_tensors(dir);
    ADD_FAILURE() << "read_model_tensors followed ../outside.bin";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

// A bf16 model's saved weights are its bf16 working weights: the manifest says so, and an
// export writes them as BF16 (torch_dtype bfloat16), each value as it is (docs/checkpoints.md
// "Which weights an export holds"). A manifest that records bf16 weights its data does not hold
// is refused rather than rounded a second time.
TEST_F(Checkpoint, Bf16WeightsExportAsTheyAreAndAMislabelledModelIsRefused) {
  GptModel bf16(*backend, small(), DType::bf16, 1, 4);
  bf16.params().initialize(5);
  const fs::path model = scratch.path() / "bf16";
  save_model(model, small(), bf16.params(), 3);
  EXPECT_EQ(read_model_info(model).weights_dtype, DType::bf16);
  EXPECT_EQ(read_model_info(dir).weights_dtype, DType::f32);

  const fs::path out = scratch.path() / "hf" / "model.safetensors";
  fs::create_directories(out.parent_path());
  const HfExport e = export_hf(model, out);
  EXPECT_EQ(e.dtype, DType::bf16);
  EXPECT_TRUE(e.saved_model);
  EXPECT_EQ(e.rounded, 0);
  const auto header = read_safetensors_header(out);
  for (const auto& [name, entry] : header) EXPECT_EQ(entry.dtype, "BF16") << name;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(out.parent_path() / "config.json"))["torch_dtype"],
            "bfloat16");
  const auto saved = read_model_tensors(model);
  const auto hf = read_safetensors(out);
  EXPECT_EQ(hf.at("transformer.wte.weight").values, saved.at("embedding.token.weight").values);
  EXPECT_EQ(hf.at("transformer.ln_f.weight").values, saved.at("final_norm.weight").values);
  // Asked for f32: the same values, widened.
  const HfExport wide = export_hf(model, out, 0, DType::f32);
  EXPECT_EQ(wide.dtype, DType::f32);
  EXPECT_EQ(read_safetensors_header(out).at("transformer.wte.weight").dtype, "F32");
  EXPECT_EQ(read_safetensors(out).at("transformer.wte.weight").values,
            saved.at("embedding.token.weight").values);

  // The f32 model relabelled bf16 (and re-signed, as an edit that knows the checksum would be).
  nlohmann::json m = nlohmann::json::parse(std::ifstream(dir / "manifest.json"));
  m["weights_dtype"] = "bf16";
  m["manifest_xxh3"] = checkpoint_format::manifest_checksum(m);
  std::ofstream(dir / "manifest.json") << m.dump(2);
  try {
    export_hf(dir, out);
    ADD_FAILURE() << "an f32 model labelled bf16 was exported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("records bf16 weights, but tensor"), std::string::npos)
        << e.what();
  }
  m["weights_dtype"] = "f8";
  m["manifest_xxh3"] = checkpoint_format::manifest_checksum(m);
  std::ofstream(dir / "manifest.json") << m.dump(2);
  try {
    read_model_info(dir);
    ADD_FAILURE() << "weights_dtype f8 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weights_dtype \"f8\" is not f32, bf16 or f16"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace kintsugi
