// Fuzzes the live-grant wire protocol: LiveGrantRequest.decode,
// LiveGrantReply.decode, a reply built from the input, and a real broker
// (LiveGrantBroker.serveOne) fed each input through its socketpair, once
// plain and once with SCM_RIGHTS or SCM_CREDENTIALS attached. A trap, a
// hang (libFuzzer's -timeout), an allocation over -malloc_limit_mb, or any
// finding of LiveGrantWireOracle is a finding.
//
// Built normally, this is a replayer: `live-grant-fuzzer FILE...`, or with no
// files 20,000 seeded inputs (`--seed N`); `live-grant-fuzzer --write-seeds
// DIR` writes the seed corpus (a valid request of each operation and flag).
// Fuzz/run.sh live-grant builds it with libFuzzer.
@preconcurrency import Glibc
@_spi(Fuzzing) import LiveGrantOracle
@_spi(Fuzzing) import Sandbox

nonisolated(unsafe) let oracle = try! LiveGrantWireOracle()

func fuzzOne(_ bytes: [UInt8]) {
    var problems = LiveGrantWireOracle.checkDecoders(bytes)
    problems += LiveGrantWireOracle.checkReply(LiveGrantWireOracle.reply(from: bytes))
    problems += oracle.check(bytes)
    problems += oracle.check(bytes, attaching: bytes.count.isMultiple(of: 2) ? .descriptor : .credentials)
    if !problems.isEmpty { fatalError(problems.joined(separator: "\n")) }
}

#if FUZZING
@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzerDriver(
    _ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

@_cdecl("LLVMFuzzerTestOneInput")
func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    fuzzOne(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
}

/// SwiftPM links executables with `main` set to this symbol; hand over to libFuzzer.
@_cdecl("live_grant_fuzzer_main")
func fuzzerMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return runFuzzerDriver(&count, &arguments, fuzzerTestOneInput)
}
#else
func contents(of path: String) -> [UInt8] {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    precondition(fd >= 0, "cannot open \(path)")
    defer { close(fd) }
    var bytes: [UInt8] = []
    var chunk = [UInt8](repeating: 0, count: 65536)
    while true {
        let count = read(fd, &chunk, chunk.count)
        if count < 0 && errno == EINTR { continue }
        guard count > 0 else { break }
        bytes += chunk[..<count]
    }
    return bytes
}

/// The seed corpus: each operation, each flag it allows, payloads at their bounds.
func writeSeeds(to folder: String) {
    let seeds: [(String, LiveGrantRequest)] = [
        ("open-panel", LiveGrantRequest(operation: .openPanel, payload: [])),
        ("open-panel-prompt", LiveGrantRequest(operation: .openPanel, payload: Array("Where are your notes?".utf8))),
        ("open-panel-read-only", LiveGrantRequest(operation: .openPanel, readOnly: true, payload: Array("notes".utf8))),
        ("open-panel-bookmark", LiveGrantRequest(operation: .openPanel, wantsBookmark: true, payload: [])),
        ("open-panel-both-512", LiveGrantRequest(operation: .openPanel, readOnly: true, wantsBookmark: true,
                                                 payload: [UInt8](repeating: 0x78, count: LiveGrantRequest.maximumPrompt))),
        ("start-accessing", LiveGrantRequest(operation: .startAccessing, payload: Array("SRBM\u{1}".utf8) + (0..<120).map { UInt8($0) })),
        ("start-accessing-8192", LiveGrantRequest(operation: .startAccessing, payload: [UInt8](repeating: 0xA5, count: LiveGrantRequest.maximumBookmark))),
        ("stop-accessing", LiveGrantRequest(operation: .stopAccessing, payload: Array("SRBM\u{1}".utf8) + (0..<120).map { UInt8($0) })),
        ("stop-accessing-1", LiveGrantRequest(operation: .stopAccessing, payload: [0])),
    ]
    for (name, request) in seeds {
        let path = folder + "/" + name
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        precondition(fd >= 0, "cannot create \(path)")
        let bytes = request.encoded()
        precondition(write(fd, bytes, bytes.count) == bytes.count && fsync(fd) == 0 && close(fd) == 0, "cannot write \(path)")
    }
    print("\(seeds.count) seeds in \(folder)")
}

@main
struct Replay {
    static func main() {
        var arguments = Array(CommandLine.arguments.dropFirst())
        if arguments.first == "--write-seeds", arguments.count == 2 { return writeSeeds(to: arguments[1]) }
        var seed: UInt64 = 1
        if arguments.first == "--seed", arguments.count >= 2, let number = UInt64(arguments[1]) {
            seed = number
            arguments.removeFirst(2)
        }
        if arguments.isEmpty {
            var inputs = LiveGrantInputs(seed: seed)
            for _ in 0..<20_000 { fuzzOne(inputs.next().bytes) }
            print("seed \(seed): 20000 inputs, \(oracle.messages) messages, \(oracle.requests) decoded: no finding")
        }
        for file in arguments { fuzzOne(contents(of: file)) }
        if !arguments.isEmpty { print("\(arguments.count) inputs: no finding") }
    }
}
#endif
