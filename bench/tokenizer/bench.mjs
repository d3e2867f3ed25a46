// The JavaScript side of bench/bench_tokenizer.cpp: tiktoken (WebAssembly, encoding gpt2) and
// gpt-3-encoder on the same documents, one core each. Usage: node bench.mjs DOCS.jsonl [passes]
// Prints one JSON object: per encoder MB/s (median of passes after a warm-up), tokens and an FNV-1a checksum of the ids.
import fs from "fs";
import { createRequire } from "module";
import { get_encoding } from "tiktoken";

const require = createRequire(import.meta.url);
const gpt3 = require("gpt-3-encoder");
const [docsPath, passesArg] = process.argv.slice(2);
const passes = parseInt(passesArg || "3");
const docs = fs.readFileSync(docsPath, "utf8").split("\n").filter(l => l).map(l => JSON.parse(l).text);
const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d, "utf8"), 0);

function measure(encode, runs) {
  const times = [];
  let tokens = 0, checksum = 0;
  for (let r = 0; r < runs; r++) {
    let n = 0, h = 0x811c9dc5;
    const t0 = process.hrtime.bigint();
    for (const d of docs) {
      const ids = encode(d);
      n += ids.length;
      if (r === 0) for (const id of ids) h = Math.imul(h ^ id, 16777619) >>> 0;
    }
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
    if (r === 0) { tokens = n; checksum = h; }
  }
  const first = times[0];
  const rest = times.length > 1 ? times.slice(1).sort((a, b) => a - b) : times;
  const median = rest[Math.floor(rest.length / 2)];
  return { mb_per_s: bytes / 1e6 / median, mb_per_s_first_pass: bytes / 1e6 / first, seconds: median, tokens, checksum };
}

const enc = get_encoding("gpt2");
const tiktoken = measure(d => enc.encode_ordinary(d), passes + 1);
const gpt3_encoder = measure(d => gpt3.encode(d), 2);
const pkg = name => JSON.parse(fs.readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url))).version;
console.log(JSON.stringify({
  node: process.version, documents: docs.length, bytes,
  tiktoken: { version: pkg("tiktoken"), ...tiktoken },
  gpt3_encoder: { version: pkg("gpt-3-encoder"), ...gpt3_encoder },
}));
