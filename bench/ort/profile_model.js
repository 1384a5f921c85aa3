// ONNX Runtime's own per-node profile of a model (session.js settings plus
// enableProfiling), summarised like bench/profile_summary.py does for
// Tessera: time per op type and the slowest nodes, each the median over REPS
// runs after 3 warm-up runs. Input: random float32 of the model's declared
// shape with batch BATCH.
//
//   node profile_model.js MODEL.onnx [REPS] [BATCH] [TOP]
const fs = require('fs');
const os = require('os');
const path = require('path');
const ort = require('onnxruntime-node');

async function main() {
  const [model, repsArg, batchArg, topArg] = process.argv.slice(2);
  if (!model) throw new Error('usage: node profile_model.js MODEL.onnx [REPS] [BATCH] [TOP]');
  const reps = Number(repsArg || 10), batch = Number(batchArg || 1), top = Number(topArg || 25);
  const prefix = path.join(os.tmpdir(), `ort_profile_${process.pid}`);
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ['cpu'], intraOpNumThreads: 2, interOpNumThreads: 1,
    graphOptimizationLevel: 'all', enableProfiling: true, profileFilePrefix: prefix,
  });
  const meta = session.inputMetadata ? session.inputMetadata[0] : undefined;
  const dims = (meta && meta.shape) ? meta.shape.map((d, i) => (typeof d === 'number' && d > 0 ? d : (i === 0 ? batch : 1)))
                                    : [batch, 3, 224, 224];
  dims[0] = batch;
  const n = dims.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  for (let i = 0; i < n; ++i) data[i] = Math.random() * 2 - 1;
  const feeds = {[session.inputNames[0]]: new ort.Tensor('float32', data, dims)};
  for (let i = 0; i < 3 + reps; ++i) await session.run(feeds);
  const file = session.endProfiling ? await session.endProfiling() : undefined;
  const trace = JSON.parse(fs.readFileSync(file || fs.readdirSync(os.tmpdir())
      .filter((f) => f.startsWith(path.basename(prefix))).map((f) => path.join(os.tmpdir(), f))[0], 'utf8'));
  // A node's input and output shapes as the trace records them: "in;in -> out".
  const dimsOf = (list) => (list || []).map((t) => Object.values(t)[0].join('x')).join(';');
  const shapesOf = (a) => `${dimsOf(a.input_type_shape)} -> ${dimsOf(a.output_type_shape)}`;
  // Node events are "<name>_kernel_time" with dur in us; one per node per run.
  const perNode = new Map();
  for (const e of trace) {
    if (e.cat !== 'Node' || !e.name.endsWith('_kernel_time')) continue;
    const key = e.name.slice(0, -'_kernel_time'.length);
    if (!perNode.has(key)) perNode.set(key, {op: e.args.op_name, shapes: shapesOf(e.args), times: []});
    perNode.get(key).times.push(e.dur / 1000);
  }
  const med = (a) => a.slice().sort((x, y) => x - y)[Math.floor(a.length / 2)];
  const nodes = [...perNode].map(([name, v]) => ({name, op: v.op, shapes: v.shapes, ms: med(v.times.slice(3))}));
  const perOp = new Map();
  for (const x of nodes) perOp.set(x.op, (perOp.get(x.op) || 0) + x.ms);
  const total = nodes.reduce((a, x) => a + x.ms, 0);
  console.log(`total ${total.toFixed(3)} ms over ${nodes.length} nodes (median per node over ${reps} runs)`);
  for (const [op, ms] of [...perOp].sort((a, b) => b[1] - a[1]))
    console.log(`${op.padEnd(28)} ${ms.toFixed(3).padStart(9)} ms ${(100 * ms / total).toFixed(1).padStart(5)} %`);
  console.log(`\nslowest ${top} nodes:`);
  for (const x of nodes.sort((a, b) => b.ms - a.ms).slice(0, top))
    console.log(`${x.ms.toFixed(3).padStart(8)} ms  ${x.op.padEnd(20)} ${x.shapes.padEnd(40)} ${x.name}`);
  if (file) fs.unlinkSync(file);
}
main().catch((e) => { console.error(e.message || e); process.exit(1); });
