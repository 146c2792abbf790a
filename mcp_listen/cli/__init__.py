"""The command line (main): serving by default, and the debugging commands (commands), client
configuration snippets (client_config) and `doctor` (doctor, doctor_report, doctor_audio).

The top layer: it may import every package below it, and nothing imports it.
"""
