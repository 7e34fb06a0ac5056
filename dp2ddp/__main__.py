from dp2ddp.cli import main

main()
