def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes minutes (creates a virtual environment and installs into it)")
