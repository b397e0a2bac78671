// The reference side of bench/tokenize_cpu.sh: tokenizes a JSONL file (one document per line,
// field "text") with @lenml/tokenizers, the JavaScript port of Hugging Face's tokenizers, the
// way `kintsugi data tokenize --jsonl` does (docs/data.md "Documents and special tokens"): each
// document as encode(text) with the post-processor's specials, then the end-of-document id
// unless it already ends with it; empty documents skipped. Writes the ids as Megatron's .bin
// does (uint16 below 65500 ids, else int32) so the two outputs compare byte for byte, and prints
// one JSON line: {"bytes", "documents", "tokens", "seconds"} (seconds: reading, parsing and
// encoding, without loading the tokenizer, as kintsugi reports it).
//
// Usage: node reference_tokenize.mjs NODE_MODULES TOKENIZER_DIR INPUT.jsonl OUT.bin
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nodeModules, dir, input, out] = process.argv.slice(2);
if (!out) {
  console.error("usage: reference_tokenize.mjs NODE_MODULES TOKENIZER_DIR INPUT.jsonl OUT.bin");
  process.exit(2);
}
const { TokenizerLoader } = await import(
  pathToFileURL(path.join(nodeModules, "@lenml/tokenizers", "dist/main.mjs")).href);
const readJson = (file) => JSON.parse(fs.readFileSync(path.join(dir, file), "utf8"));
const config = readJson("tokenizer_config.json");
const tokenizer = TokenizerLoader.fromPreTrained({
  tokenizerJSON: readJson("tokenizer.json"), tokenizerConfig: config,
});
// The end-of-document id: tokenizer_config.json's eos_token, as kintsugi takes it.
const eosName = typeof config.eos_token === "string" ? config.eos_token : config.eos_token.content;
const eos = tokenizer.model.tokens_to_ids.get(eosName);
if (eos === undefined) throw new Error(`eos_token ${eosName} is not in the vocabulary`);
const wide = tokenizer.model.vocab.length >= 65500;

const start = process.hrtime.bigint();
const text = fs.readFileSync(input, "utf8");
const chunks = [];
let documents = 0, tokens = 0;
for (const line of text.split("\n")) {
  if (line === "") continue;
  const doc = JSON.parse(line).text;
  if (doc === "") continue;
  const ids = tokenizer.encode(doc, { add_special_tokens: true });
  if (ids.length === 0 || ids[ids.length - 1] !== eos) ids.push(eos);
  chunks.push(wide ? Int32Array.from(ids) : Uint16Array.from(ids));
  documents += 1;
  tokens += ids.length;
}
const seconds = Number(process.hrtime.bigint() - start) / 1e9;
const fd = fs.openSync(out, "w");
for (const c of chunks) fs.writeSync(fd, new Uint8Array(c.buffer, c.byteOffset, c.byteLength));
fs.closeSync(fd);
console.log(JSON.stringify({ bytes: Buffer.byteLength(text), documents, tokens, seconds }));
