// STUB: replaced by the amk command.
int main() { return 2; }
