// A launcher written against the library, not the CLI: the code path
// docs/live-grants.md shows. Its sandboxes are recorded as `run`'s are, so
// `sandboxed-run grants holders` lists them and `grants revoke --end-holders`
// ends them.
//
//   swift-launcher --app ID [--view host] [--grant NAME=BOOKMARK]... [--picker PROGRAM] [--repeat N] -- COMMAND...
//
// With --repeat N it launches the command N times in this one process and
// prints, ten times along the way, its open descriptors and resident
// memory: a long-lived host must stay flat.
@preconcurrency import Glibc
import AppSandbox

func fail(_ message: String) -> Never {
    fputs("swift-launcher: \(message)\n", stderr)
    exit(125)
}

var app: String?
var grantSpecs: [String] = []
var picker: String?
var view: FileSystemView = .private
var repeatCount = 1
var command: [String] = []
var words = CommandLine.arguments.dropFirst()
while let word = words.popFirst() {
    switch word {
    case "--app": app = words.popFirst()
    case "--grant": grantSpecs.append(words.popFirst() ?? "")
    case "--picker": picker = words.popFirst()
    case "--view": view = words.popFirst().flatMap(FileSystemView.init(rawValue:)) ?? view
    case "--repeat": repeatCount = words.popFirst().flatMap { Int($0) } ?? 0
    case "--": command = Array(words); words = []
    default: fail("unknown argument \(word)")
    }
}
guard let app, !command.isEmpty, repeatCount >= 1 else { fail("usage: swift-launcher --app ID [--grant NAME=BOOKMARK]... [--repeat N] -- COMMAND...") }

/// Open descriptors and resident memory (KiB) of this process.
func footprint() -> (descriptors: Int, residentKiB: Int) {
    var descriptors = 0
    if let folder = opendir("/proc/self/fd") {
        while let entry = readdir(folder) { if entry.pointee.d_name.0 != UInt8(ascii: ".") { descriptors += 1 } }
        closedir(folder)
    }
    var resident = 0
    if let file = fopen("/proc/self/statm", "r") {
        var size = 0, pages = 0
        if fscanf_pair(file, &size, &pages) { resident = pages * Int(sysconf(Int32(_SC_PAGESIZE))) / 1024 }
        fclose(file)
    }
    return (descriptors - 1, resident)  // less the one listing /proc/self/fd
}

func fscanf_pair(_ file: UnsafeMutablePointer<FILE>, _ first: inout Int, _ second: inout Int) -> Bool {
    var line = [CChar](repeating: 0, count: 256)
    guard fgets(&line, 256, file) != nil else { return false }
    let fields = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self).split(separator: " ").compactMap { Int($0) }
    guard fields.count >= 2 else { return false }
    (first, second) = (fields[0], fields[1])
    return true
}

/// This process's environment: where the state, the containers and the runtime folder are.
func currentEnvironment() -> [String: String] {
    var variables: [String: String] = [:]
    var entry = environ
    while let pointer = entry.pointee {
        let text = String(cString: pointer)
        if let equals = text.firstIndex(of: "=") { variables[String(text[..<equals])] = String(text[text.index(after: equals)...]) }
        entry += 1
    }
    return variables
}

do {
    let session = try SandboxSession(environment: currentEnvironment())
    let appID = try AppID(app)
    let policy = Policy.defaultPolicy
    var status: Int32 = 0
    // Ctrl-C and the like go to the sandbox (as `run` does), and end this launcher once it ended.
    if repeatCount == 1 { ConfinedProcess.holdTerminationSignals() }
    for round in 1...repeatCount {
        var request = try session.launchRequest(app: appID, policy: policy, command: command)
        request.view = view
        var grants: [ResolvedGrant] = []
        var broker: GrantBroker?
        if !grantSpecs.isEmpty {
            let launchGrants = try session.launchGrants(app: appID, policy: policy)
            broker = launchGrants.broker
            for spec in grantSpecs {
                let (name, file) = try LaunchGrants.parse(spec)
                grants.append(try launchGrants.grant(name: name, bookmark: file))
            }
        }
        let sandbox = try session.launch(request, grants: grants, picker: picker.map(AskpassPicker.init(program:)), broker: broker)
        if repeatCount == 1 { sandbox.forwardSignals() }
        status = try sandbox.wait().exitCode
        if repeatCount > 1, round % max(1, repeatCount / 10) == 0 {
            let now = footprint()
            print("launches \(round) descriptors \(now.descriptors) resident \(now.residentKiB)")
        }
    }
    exit(status)
} catch {
    fail("\(error)")
}
