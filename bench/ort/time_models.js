// Times the one-layer models written by make_conv_models.py with ONNX Runtime
// (onnxruntime-node, CPU, 2 intra-op threads, all graph optimisations): the
// median over REPS runs, after 3 warm-up runs, of the conv's kernel time by
// ONNX Runtime's own profiler (session.js kernelTimes: the binding's fresh
// output buffer per run, and its page faults, are not the layer's). Prints
// "<set>.<name>\t<median ms>" per layer of LAYERS_TXT.
//
//   node time_models.js LAYERS_TXT MODEL_DIR [REPS]
const fs = require('fs');
const path = require('path');
const {ort, createSession, kernelTimes, median} = require('./session');

async function main() {
  const [layersTxt, dir, repsArg] = process.argv.slice(2);
  const reps = Number(repsArg || 15);
  for (const line of fs.readFileSync(layersTxt, 'utf8').split('\n')) {
    const f = line.trim().split(/\s+/);
    if ((f.length !== 9 && f.length !== 10) || f[0].startsWith('#')) continue;
    const [set, name] = [f[0], f[1]];
    const [h, w, c, k, r, stride] = f.slice(2, 8).map(Number);
    const session = await createSession(path.join(dir, `${set}.${name}.onnx`), true);
    const shape = [1, c, h, w];
    const feeds = {[session.inputNames[0]]: new ort.Tensor('float32', new Float32Array(c * h * w).fill(0.5), shape)};
    const times = await kernelTimes(session, feeds, reps);
    process.stdout.write(`${set}.${name}\t${median(times).toFixed(4)}\n`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
