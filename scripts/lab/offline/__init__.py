"""Runs on an air-gapped GPU machine (docs/GPU.md): the offline bundle (``bundle``), the limits of
what travels there and what comes back (``limits``), and the two evidence parts (``evidence``)."""
