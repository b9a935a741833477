from strom.cli import main

main()
