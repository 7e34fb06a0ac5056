"""What dp2ddp knows about code: facts about one module, then about a project.

Nothing here imports the codemods, ``check`` or the CLI: they read these facts.
"""
