// Text with documents separated by "<|endoftext|>" lines (as `kintsugi data brown` writes them)
// to JSONL with one {"text": ...} record per non-empty document, repeated until the output
// holds at least MIN_MB megabytes (0: once). Used by bench/tokenize_cpu.sh so that kintsugi and
// the reference read exactly the same documents.
//
// Usage: node to_jsonl.mjs INPUT.txt OUTPUT.jsonl [MIN_MB]
import fs from "node:fs";

const [input, output, minMb = "0"] = process.argv.slice(2);
const docs = fs.readFileSync(input, "utf8").split(/^<\|endoftext\|>\r?\n?/m).filter((d) => d !== "");
const once = docs.map((text) => JSON.stringify({ text })).join("\n") + "\n";
const copies = Math.max(1, Math.ceil((Number(minMb) * 1e6) / Buffer.byteLength(once)));
const fd = fs.openSync(output, "w");
for (let i = 0; i < copies; ++i) fs.writeSync(fd, once);
fs.closeSync(fd);
console.log(`${output}: ${docs.length} documents x ${copies}`);
