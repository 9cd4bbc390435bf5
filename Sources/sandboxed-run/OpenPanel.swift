@preconcurrency import Glibc
import ArgumentParser
import AppSandbox
import SystemPackage

/// The client side of live grants, inside a sandbox: one request on the
/// broker's socket (its descriptor in $SANDBOXED_RUN_BROKER_FD), one answer.
enum BrokerClient {
    static let unavailable =
        "live grants are not available here: \(ConfinementPlan.brokerVariable) is not set "
        + "(outside a sandbox, or one whose policy has neither a user-selected key nor com.apple.security.files.bookmarks.app-scope)"

    static func send(_ request: LiveGrantRequest, command: String) throws -> LiveGrantReply {
        guard let value = getenv(ConfinementPlan.brokerVariable).map({ String(cString: $0) }) else {
            Console.error("\(command): \(unavailable)")
            throw ExitCode(3)
        }
        guard !value.isEmpty, value.count <= 9, value.utf8.allSatisfy({ (0x30...0x39).contains($0) }), let fd = CInt(value), fd > 2 else {
            Console.error("\(command): \(ConfinementPlan.brokerVariable)=\(value) is not a descriptor number above 2")
            throw ExitCode(125)
        }
        do { return try LiveGrantClient.send(request, on: fd) } catch {
            Console.error("\(command): \(error)")
            throw ExitCode(125)
        }
    }

    /// The reply's text on stdout, and a newline.
    static func printPath(_ reply: LiveGrantReply) throws {
        let line = reply.text + [UInt8(ascii: "\n")]
        var offset = 0
        while offset < line.count {
            let written = line[offset...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { throw ExitCode(125) }
            offset += written
        }
    }

    /// A refusal: the broker's message, and the exit code of its status
    /// (`resolve`'s codes for a bookmark not followed).
    static func fail(_ reply: LiveGrantReply, command: String) -> ExitCode {
        Console.error("\(command): " + Printable.path(bytes: reply.text))
        let codes: [LiveGrantReply.Status: Int32] = [.cancelled: 1, .noPicker: 2, .unavailable: 3, .refused: 4, .busy: 5, .notAccessing: 6]
        if reply.status.rawValue >= 11 { return ExitCode(Int32(reply.status.rawValue)) }
        return ExitCode(codes[reply.status] ?? 125)
    }

    /// A bookmark file inside the sandbox: the command's own, so every link is
    /// followed (it reaches only what the command may); replaced atomically and synced.
    static func bookmarkFile(_ path: String) throws -> BookmarkFile {
        try BookmarkFile(path: Picking.absolute(path), trust: .everyLink())
    }

    static func readBookmark(_ path: String, command: String) throws -> [UInt8] {
        guard let bytes = try bookmarkFile(path).read() else {
            Console.error("\(command): \(path) does not exist: make a bookmark with open-panel -o")
            throw ExitCode(125)
        }
        guard !bytes.isEmpty, bytes.count <= LiveGrantRequest.maximumBookmark else {
            Console.error("\(command): \(path) is not a bookmark (\(bytes.count) bytes)")
            throw ExitCode(Int32(BookmarkStatus.invalid.exitCode))
        }
        return bytes
    }
}

/// `$SANDBOXED_RUN open-panel`, inside a sandbox: asks the broker for a
/// folder, which asks the person; prints where the command reaches it.
struct OpenPanel: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "open-panel",
        abstract: "Inside a sandbox: ask the person for a folder, and print the path at which the command now reaches it.",
        discussion: """
            Speaks to the launcher's broker through the descriptor in $SANDBOXED_RUN_BROKER_FD (see docs/live-grants.md), \
            which the sandbox has when its policy has com.apple.security.files.user-selected.read-only or .read-write; \
            the person is asked through run --picker, or else on the terminal the launcher relays (the command's output \
            is held back meanwhile, and what is typed never reaches the command). The folder is attached beneath /run/sandboxed-run/grants for as \
            long as the sandbox runs. With -o (the policy needs com.apple.security.files.bookmarks.app-scope), a bookmark \
            of the folder sealed for the app is written there, for start-accessing in this run or a later one. Exit codes: \
            0 granted (the path on stdout), 1 cancelled, 2 no picker and no terminal to ask with, 3 live grants unavailable in this \
            sandbox, 4 refused (the folder may not be granted, or attaching it failed), 5 too many requests, 125 any other \
            failure (the bookmark could not be written, say).
            """
    )

    @Flag(help: "Ask for read-only access.") var readOnly = false
    @Option(help: "Text the picker shows (escaped, and cut to 200 characters).") var prompt: String?
    @Option(name: .shortAndLong, help: "Write a bookmark of the folder here (replaced atomically).") var output: String?

    func run() throws {
        // Checked before the person is asked: a file that cannot be written loses nothing.
        let file = try output.map(BrokerClient.bookmarkFile)
        let request = LiveGrantRequest(
            operation: .openPanel, readOnly: readOnly, wantsBookmark: output != nil,
            payload: Array((prompt ?? "").utf8.prefix(LiveGrantRequest.maximumPrompt)))
        let reply = try BrokerClient.send(request, command: "open-panel")
        guard reply.status == .granted else { throw BrokerClient.fail(reply, command: "open-panel") }
        if let file {
            guard let bookmark = reply.bookmark else {
                Console.error("open-panel: the broker sent no bookmark")
                throw ExitCode(125)
            }
            try file.replace(with: bookmark)
        }
        try BrokerClient.printPath(reply)
    }
}

/// `$SANDBOXED_RUN start-accessing BOOKMARK`, inside a sandbox.
struct StartAccessing: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "start-accessing",
        abstract: "Inside a sandbox: make the folder of a bookmark of this app's reachable now, and print where.",
        discussion: """
            The broker resolves the bookmark for the sandbox's app as resolve does and attaches its folder beneath \
            /run/sandboxed-run/grants; each start is counted, and stop-accessing ends one. The policy needs \
            com.apple.security.files.bookmarks.app-scope. A folder that moved is followed and the bookmark rewritten \
            with its new place. Exit codes: 0 reachable (the path on stdout), 3 unavailable in this sandbox, 4 refused, \
            5 too many, 10 reachable but the renewed bookmark could not be written, and resolve's: 11 replaced, \
            12 missing, 13 revoked, 14 wrong-app, 15 invalid, 16 covered, 17 inaccessible; 125 any other failure.
            """
    )

    @Argument(help: "The bookmark file.") var bookmark: String

    func run() throws {
        let blob = try BrokerClient.readBookmark(bookmark, command: "start-accessing")
        let reply = try BrokerClient.send(LiveGrantRequest(operation: .startAccessing, payload: blob), command: "start-accessing")
        guard reply.status == .granted else { throw BrokerClient.fail(reply, command: "start-accessing") }
        try BrokerClient.printPath(reply)
        if let renewed = reply.bookmark {
            do { try BrokerClient.bookmarkFile(bookmark).replace(with: renewed) } catch {
                Console.error("start-accessing: the folder moved, and \(bookmark) could not be rewritten with its new place: \(error)")
                throw ExitCode(Int32(BookmarkStatus.moved.exitCode))
            }
            Console.notice("the folder moved: \(bookmark) was rewritten with its new place")
        }
    }
}

/// `$SANDBOXED_RUN stop-accessing BOOKMARK`, inside a sandbox.
struct StopAccessing: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stop-accessing",
        abstract: "Inside a sandbox: end one start-accessing of a bookmark; at the last, its folder is unreachable again.",
        discussion: """
            Descriptors already open in the folder keep working. A folder an open panel gave stays for the run. \
            Exit codes: 0 done, 3 unavailable in this sandbox, 4 refused, 6 not accessing that bookmark, \
            15 not a bookmark of this app, 125 any other failure.
            """
    )

    @Argument(help: "The bookmark file.") var bookmark: String

    func run() throws {
        let blob = try BrokerClient.readBookmark(bookmark, command: "stop-accessing")
        let reply = try BrokerClient.send(LiveGrantRequest(operation: .stopAccessing, payload: blob), command: "stop-accessing")
        guard reply.status == .granted else { throw BrokerClient.fail(reply, command: "stop-accessing") }
    }
}
