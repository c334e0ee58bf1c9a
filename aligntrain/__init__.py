"""aligntrain: strategy-aware training for test-time compute.

The library: pure logic, importable, no orchestration. Prefect flows live in
``flows/`` and ``tasks/``, MLflow tracking in ``aligntrain.tracking``.
"""

__version__ = "0.1.0"
