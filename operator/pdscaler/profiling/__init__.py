"""Pre-deployment profiling from performance databases (no GPU): the I/O edge that asks
NVIDIA's aiconfigurator (``aic``), installed with the ``profiles`` extra
(``pip install 'pdscaler[profiles]'``). Never imported by the operator: ``pdscaler plan
profile`` imports it when it runs; the fits and the records are ``pdscaler.sim.measured``.
"""
