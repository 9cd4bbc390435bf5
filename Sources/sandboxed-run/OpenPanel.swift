@preconcurrency import Glibc
import ArgumentParser
import AppSandbox
import SystemPackage

/// `$SANDBOXED_RUN open-panel`, inside a sandbox: asks the broker for a
/// folder, which asks the person; prints where the command reaches it.
struct OpenPanel: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open-panel",
        abstract: "Inside a sandbox: ask the person for a folder, and print the path at which the command now reaches it.",
        discussion: """
            Speaks to the launcher's broker through the descriptor in $SANDBOXED_RUN_BROKER_FD (see docs/live-grants.md), \
            which the sandbox has when it was started with run --picker and its policy has \
            com.apple.security.files.user-selected.read-only or .read-write. The folder is attached beneath \
            /run/sandboxed-run/grants for as long as the sandbox runs. Exit codes: 0 granted (the path on stdout), \
            1 cancelled, 2 no picker to ask with, 3 live grants unavailable in this sandbox, 4 refused (the folder \
            may not be granted, or attaching it failed), 5 too many requests, 125 any other failure.
            """
    )

    @Flag(help: "Ask for read-only access.") var readOnly = false
    @Option(help: "Text the picker shows (escaped, and cut to 200 characters).") var prompt: String?

    func run() throws {
        guard let value = getenv(ConfinementPlan.brokerVariable).map({ String(cString: $0) }) else {
            Console.error("open-panel: live grants are not available here: \(ConfinementPlan.brokerVariable) is not set "
                + "(outside a sandbox, or one started without run --picker, or whose policy takes no user-selected folders)")
            throw ExitCode(3)
        }
        guard !value.isEmpty, value.count <= 9, value.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let fd = CInt(value), fd > 2 else {
            Console.error("open-panel: \(ConfinementPlan.brokerVariable)=\(value) is not a descriptor number above 2")
            throw ExitCode(125)
        }
        let request = LiveGrantRequest(operation: .openPanel, readOnly: readOnly, prompt: Array((prompt ?? "").utf8.prefix(LiveGrantRequest.maximumPrompt)))
        let reply: LiveGrantReply
        do { reply = try LiveGrantClient.send(request, on: fd) } catch {
            Console.error("open-panel: \(error)")
            throw ExitCode(125)
        }
        switch reply.status {
        case .granted:
            let line = reply.text + [UInt8(ascii: "\n")]
            var offset = 0
            while offset < line.count {
                let written = line[offset...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else { throw ExitCode(125) }
                offset += written
            }
        default:
            Console.error("open-panel: " + Printable.path(bytes: reply.text))
            let codes: [LiveGrantReply.Status: Int32] = [.cancelled: 1, .noPicker: 2, .unavailable: 3, .refused: 4, .busy: 5]
            throw ExitCode(codes[reply.status] ?? 125)
        }
    }
}
