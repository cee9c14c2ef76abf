"""rStar2-Agent reproducibility kit: agentic RL for math with a Python tool (GRPO-RoC).

Modules are named by concept (see DEVELOPERS.md): ``config``, ``sandbox``, ``reward``,
``rollout``, ``algo``, ``data``, ``train``, ``eval``, ``analysis``, ``figures``, ``pipeline``;
``bridge`` is the one package that talks to VERL, Ray and SGLang.
"""

__version__ = "0.1.0"
