// Times the one-layer models written by make_op_models.py with ONNX Runtime
// (onnxruntime-node, CPU, 2 intra-op threads, all graph optimisations), as
// time_models.js does for convolutions: median ms per run over REPS runs after
// 3 warm-up runs, output preallocated. Prints "<set>.<name>\t<median ms>".
//
//   node time_op_models.js MODEL_DIR [REPS]
const fs = require('fs');
const path = require('path');
const ort = require('onnxruntime-node');

const volume = (s) => s.reduce((a, b) => a * b, 1);

async function main() {
  const [dir, repsArg] = process.argv.slice(2);
  const reps = Number(repsArg || 15);
  const shapes = JSON.parse(fs.readFileSync(path.join(dir, 'shapes.json'), 'utf8'));
  for (const [key, io] of Object.entries(shapes)) {
    const session = await ort.InferenceSession.create(path.join(dir, `${key}.onnx`), {
      executionProviders: ['cpu'], intraOpNumThreads: 2, interOpNumThreads: 1, graphOptimizationLevel: 'all',
    });
    const feeds = {};
    for (const [name, shape] of Object.entries(io.inputs))
      feeds[name] = new ort.Tensor('float32', new Float32Array(volume(shape)).fill(0.5), shape);
    const fetches = {out: new ort.Tensor('float32', new Float32Array(volume(io.output)), io.output)};
    for (let i = 0; i < 3; ++i) await session.run(feeds, fetches);
    const times = [];
    for (let i = 0; i < reps; ++i) {
      const t0 = process.hrtime.bigint();
      await session.run(feeds, fetches);
      times.push(Number(process.hrtime.bigint() - t0) / 1e6);
    }
    times.sort((a, b) => a - b);
    process.stdout.write(`${key}\t${times[Math.floor(times.length / 2)].toFixed(4)}\n`);
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
