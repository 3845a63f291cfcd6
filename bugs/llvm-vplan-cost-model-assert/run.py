"""Optimizes kernel.ll at -O3 (loop vectorization on) for an AVX-512 x86-64 CPU, with llvmlite only. Nothing is
run, so any host will do. An LLVM built with assertions (llvmlite's is) aborts in the loop vectorizer on the bug,
printing "VPlan cost model and legacy cost model disagreed"; exit status 0 means it optimized the loop."""
import sys
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm

CPU = "skylake-avx512"  # also rocketlake, znver4; not haswell or x86-64-v3 (AVX2 only)

print(f"llvmlite {llvmlite.__version__}, LLVM {'.'.join(map(str, llvm.llvm_version_info))}, target CPU {CPU}",
      flush=True)
llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()
machine = llvm.Target.from_triple("x86_64-unknown-linux-gnu").create_target_machine(cpu=CPU, opt=3)
module = llvm.parse_assembly((Path(__file__).parent / "kernel.ll").read_text())
module.verify()
module.triple, module.data_layout = machine.triple, str(machine.target_data)
passes = llvm.create_pass_builder(machine, llvm.create_pipeline_tuning_options(speed_level=3))
passes.getModulePassManager().run(module, passes)
print("optimized without an assertion")
sys.exit(0)
