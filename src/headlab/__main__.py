from headlab.cli.main import main

main()
