"""The benchmarks: each a module run from the repository's root as ``python -m benchmarks.<name>``,
so they import each other, the package and the tests' model builders (``tests.hf_models``) as
packages, with no edits of ``sys.path``."""
