// The independent byte-level BPE: Hugging Face's pure JavaScript
// tokenizers.js (npm @huggingface/tokenizers) reading the same tokenizer.json.
//   node tokenizer_oracle.mjs NODE_MODULES TOKENIZER.json TEXT_FILE ADD_SPECIAL
// prints the ids of the file's text (read as UTF-8, invalid bytes as U+FFFD)
// as JSON, then the decoded text of those ids.
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import path from "node:path";

const [modules, tokenizerPath, textPath, addSpecial] = process.argv.slice(2);
const entry = path.join(modules, "@huggingface", "tokenizers", "dist", "tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(entry).href);
const json = JSON.parse(readFileSync(tokenizerPath, "utf8"));
const configPath = path.join(path.dirname(tokenizerPath), "tokenizer_config.json");
let config = {};
try { config = JSON.parse(readFileSync(configPath, "utf8")); } catch {}
const tokenizer = new Tokenizer(json, config);
const text = new TextDecoder("utf-8").decode(readFileSync(textPath));
const { ids } = tokenizer.encode(text, { add_special_tokens: addSpecial === "1" });
process.stdout.write(JSON.stringify({ ids, decoded: tokenizer.decode(ids) }) + "\n");
