// What a caller of Sandbox uses from the floor beneath it: descriptors,
// paths as bytes, link trust (SystemKit), and the policy reader's errors.
@_exported import PropertyLists
@_exported import SystemKit
