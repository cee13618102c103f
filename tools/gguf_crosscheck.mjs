// Reads a GGUF file with Hugging Face's independent reader (@huggingface/gguf
// from npm) and prints its version, typed metadata and tensor infos as JSON,
// for tests/io/gguf_crosscheck_test.py to compare with what kiln wrote.
//   NODE_PATH=/path/to/node_modules node tools/gguf_crosscheck.mjs FILE
// Exit 77 when the module is not installed (npm install @huggingface/gguf).
import { createRequire } from "node:module";
import path from "node:path";

const require = createRequire(path.join(process.cwd(), "noop.js"));
let gguf;
try {
  const resolved = require.resolve("@huggingface/gguf", { paths: (process.env.NODE_PATH || "").split(":").filter(Boolean) });
  ({ gguf } = await import(resolved));
} catch (e) {
  console.error("gguf_crosscheck: @huggingface/gguf is not installed (" + e.message.split("\n")[0] + ")");
  process.exit(77);
}

const file = path.resolve(process.argv[2]);
const out = await gguf(file, { allowLocalFile: true, typedMetadata: true });
const plain = (v) => (typeof v === "bigint" ? v.toString() : Array.isArray(v) ? v.map(plain) : v);
const metadata = {};
for (const [key, entry] of Object.entries(out.typedMetadata)) {
  metadata[key] = { type: entry.type, value: plain(entry.value) };
  if (entry.subType !== undefined) metadata[key].subType = entry.subType;
}
const tensors = out.tensorInfos.map((t) => ({
  name: t.name,
  shape: t.shape.map(String),
  dtype: t.dtype,
  offset: t.offset.toString(),
}));
console.log(JSON.stringify({ metadata, tensors, tensorDataOffset: out.tensorDataOffset.toString() }));
