#!/usr/bin/env python3
"""ResNet-50's launches beside ONNX Runtime's nodes, layer by layer.

Alternates `tessera bench --profile` and bench/ort/profile_model.js ROUNDS
times on build/models/resnet50.onnx (bash scripts/prepare_models.sh makes
it) and prints, per conv (and the pools and the head), the median over the
rounds of each runtime's per-launch median, their difference and Tessera's
descriptor. ONNX Runtime's nodes are matched by the torchvision export's
names (layerL.B/relu = conv1, relu_1 = conv2, conv3, downsample), in the
order Tessera runs them. Where the two put a block's residual add on
different convs (layer1.0: ONNX Runtime on conv3, Tessera on the
downsample), compare the pair's sum.

    /usr/bin/python3 bench/resnet50_layers_vs_ort.py [BATCH] [ROUNDS] [TESSERA BENCH OPTIONS]

At batch 8, pass `--micro-batch off`: micro-batched launches repeat per
group of images and do not line up with ONNX Runtime's nodes.
"""
import statistics
import subprocess
import sys


def ort_order():
    order = ['/relu/Relu_output_0_nchwc', '/maxpool/MaxPool_output_0_nchwc']
    for layer, blocks in ((1, 3), (2, 4), (3, 6), (4, 3)):
        for b in range(blocks):
            p = f'/layer{layer}/layer{layer}.{b}/'
            order += [p + 'relu/Relu_output_0_nchwc', p + 'relu_1/Relu_output_0_nchwc', p + 'conv3/Conv_output_0_nchwc']
            if b == 0:
                order.append(p + 'downsample/downsample.0/Conv_output_0_nchwc')
    return order + ['/avgpool/GlobalAveragePool_output_0_nchwc', '/fc/Gemm']


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    model = 'build/models/resnet50.onnx'
    inp = 'build/models/resnet50_input.npy' if batch == 8 else 'build/models/resnet50_input_b1.npy'
    if batch not in (1, 8):
        sys.exit('batch 1 or 8 (the prepared inputs)')
    iters = 10 if batch == 8 else 40
    order = ort_order()
    ours, theirs, desc = [], [], []
    for _ in range(rounds):
        subprocess.run(['./build/release/tessera', 'bench', model, '--iterations', str(iters), '--input', inp,
                        '--profile', '/tmp/tessera_layers.json'] + sys.argv[3:], capture_output=True, check=True)
        lines = subprocess.run(['/usr/bin/python3', 'bench/profile_summary.py', '/tmp/tessera_layers.json',
                                '--in-order'], capture_output=True, text=True, check=True).stdout.splitlines()
        launches = lines[-(len(order) + 1):][1:]  # the input permute first
        ours.append([float(l.split()[0]) for l in launches])
        desc = [l.split()[-1].split(':f32')[0] if 'conv2d' in l else l.split()[-1].split(':')[0] for l in launches]
        out = subprocess.run(['node', 'bench/ort/profile_model.js', model, str(iters), str(batch), '100'],
                             capture_output=True, text=True, check=True).stdout
        node_ms = {}
        for line in out.splitlines():
            f = line.split()
            if len(f) >= 4 and f[1] == 'ms' and f[3].startswith('/'):
                node_ms[f[3]] = float(f[0])
        theirs.append([node_ms[n] for n in order])
    print(f'ResNet-50 batch {batch}, {rounds} alternated rounds: median of per-launch medians, ms')
    print('| # | Tessera | ONNX Runtime | difference | launch |')
    print('|---|---|---|---|---|')
    total_t = total_o = 0.0
    for i in range(len(order)):
        t = statistics.median(r[i] for r in ours)
        o = statistics.median(r[i] for r in theirs)
        total_t += t
        total_o += o
        print(f'| {i + 1} | {t:.3f} | {o:.3f} | {t - o:+.3f} | {desc[i]} |')
    print(f'| sum | {total_t:.2f} | {total_o:.2f} | {total_t - total_o:+.2f} | |')


if __name__ == '__main__':
    main()
