"""The SimPy model that times a plan: kernels and CTAs on SMs (`simulation`), groups of CTAs
stepping through their programs (`groups`), shared links (`links`, `fluid`), the stretched
timing of long kernels (`stretch`, `loops`), the host's side of a call (`host`), the work
bound (`limits`), the result (`result`, `timeline`); what each CTA moves (`workload/`) and the
L2 model (`l2/`). docs/engine-model.md states the model.
"""
