// Writes a small-vocabulary byte-level BPE tokenizer in GPT-2's file format: GPT-2's 256 byte
// tokens, its first MERGES merges in rank order, and <|endoftext|> last (MERGES + 257 ids in
// all). GPT-2's own ids 256.. are its merges in rank order, so the first MERGES merges only
// produce tokens below 256 + MERGES and the result is GPT-2's tokenizer stopped early: the
// same pre-tokenization, longer token sequences, a vocabulary small enough that the test
// models' embeddings and LM heads no longer dominate their size and time
// (docs/architecture.md, "The test suite").
//
// Usage: node scripts/make_small_tokenizer.mjs GPT2_DIR OUT_DIR MERGES
import fs from "node:fs";
import path from "node:path";

const [gpt2Dir, outDir, mergesArg] = process.argv.slice(2);
const count = Number(mergesArg);
if (!gpt2Dir || !outDir || !Number.isInteger(count) || count < 1) {
  console.error("usage: make_small_tokenizer.mjs GPT2_DIR OUT_DIR MERGES (MERGES >= 1)");
  process.exit(2);
}
const encoder = JSON.parse(fs.readFileSync(path.join(gpt2Dir, "encoder.json"), "utf8"));
const lines = fs.readFileSync(path.join(gpt2Dir, "vocab.bpe"), "utf8").split("\n");
const merges = lines.slice(1).filter((line) => line.length > 0).slice(0, count);
if (merges.length !== count) throw new Error(`vocab.bpe has fewer than ${count} merges`);

const small = {};
for (const [symbols, id] of Object.entries(encoder)) {
  if (id < 256 + count) small[symbols] = id;
}
merges.forEach((merge, rank) => {
  const [left, right] = merge.split(" ");
  for (const part of [left, right, left + right]) {
    if (!(part in small)) throw new Error(`merge ${rank} (${merge}) needs "${part}" above id ${255 + count}`);
  }
  if (small[left + right] !== 256 + rank) throw new Error(`merge ${rank} (${merge}) is not id ${256 + rank}`);
});
small["<|endoftext|>"] = 256 + count;
if (Object.keys(small).length !== count + 257) throw new Error("ids are not 0..MERGES+256");

fs.mkdirSync(outDir, { recursive: true });
// Written under temporary names and renamed, so an interrupted run leaves no half file.
const write = (name, text) => {
  const target = path.join(outDir, name);
  fs.writeFileSync(`${target}.tmp`, text);
  fs.renameSync(`${target}.tmp`, target);
};
write("vocab.bpe", [lines[0], ...merges, ""].join("\n"));
write("encoder.json", JSON.stringify(small));
