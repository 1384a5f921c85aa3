// Times the one-layer models written by make_op_models.py with ONNX Runtime
// (onnxruntime-node, CPU, 2 intra-op threads, all graph optimisations), as
// time_models.js does for convolutions: the median over REPS runs, after 3
// warm-up runs, of the op's kernel time by ONNX Runtime's own profiler
// (session.js kernelTimes). Prints "<set>.<name>\t<median ms>".
//
//   node time_op_models.js MODEL_DIR [REPS]
const fs = require('fs');
const path = require('path');
const {ort, createSession, kernelTimes, median} = require('./session');

const volume = (s) => s.reduce((a, b) => a * b, 1);

async function main() {
  const [dir, repsArg] = process.argv.slice(2);
  const reps = Number(repsArg || 15);
  const shapes = JSON.parse(fs.readFileSync(path.join(dir, 'shapes.json'), 'utf8'));
  for (const [key, io] of Object.entries(shapes)) {
    const session = await createSession(path.join(dir, `${key}.onnx`), true);
    const feeds = {};
    for (const [name, shape] of Object.entries(io.inputs))
      feeds[name] = new ort.Tensor('float32', new Float32Array(volume(shape)).fill(0.5), shape);
    const times = await kernelTimes(session, feeds, reps);
    process.stdout.write(`${key}\t${median(times).toFixed(4)}\n`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
