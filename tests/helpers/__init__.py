"""What several test files share and none of them owns: data writers, small models and runs, process helpers.

Test files import from here (``from tests.helpers.mnist_idx import write_mnist_idx``), never from one another:
a test module may skip itself when an optional dependency is missing, and a helper inside it would take every
module that imports it down with it as a collection error.
"""
