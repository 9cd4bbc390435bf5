// What a caller of Sandbox uses from the floor beneath it: descriptors,
// paths as bytes, link trust (SystemKit), the policy reader's errors, and
// the network by name's hosts (Egress).
@_exported import PropertyLists
@_exported import SystemKit
@_exported import Egress
