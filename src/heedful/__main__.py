from heedful.cli import main

main()
