// The JavaScript side of bench/bench_tokenizer.cpp: tiktoken (WebAssembly, encoding gpt2) and
// gpt-3-encoder on the same documents, one core each. Usage: node bench.mjs DOCS.jsonl [passes]
// Prints one JSON object: per encoder MB/s by wall clock and by process CPU time (median of passes
// after a warm-up), tokens and an FNV-1a checksum of the ids.
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
  const times = [], cpu = [];
  let tokens = 0, checksum = 0;
  for (let r = 0; r < runs; r++) {
    let n = 0, h = 0x811c9dc5;
    const t0 = process.hrtime.bigint(), c0 = process.cpuUsage();
    for (const d of docs) {
      const ids = encode(d);
      n += ids.length;
      if (r === 0) for (const id of ids) h = Math.imul(h ^ id, 16777619) >>> 0;
    }
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
    const c = process.cpuUsage(c0);
    cpu.push((c.user + c.system) / 1e6);
    if (r === 0) { tokens = n; checksum = h; }
  }
  const median = xs => { const r = xs.length > 1 ? xs.slice(1).sort((a, b) => a - b) : xs; return r[Math.floor(r.length / 2)]; };
  return { mb_per_s: bytes / 1e6 / median(times), cpu_mb_per_s: bytes / 1e6 / median(cpu),
           mb_per_s_first_pass: bytes / 1e6 / times[0], seconds: median(times), cpu_seconds: median(cpu), tokens, checksum };
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
