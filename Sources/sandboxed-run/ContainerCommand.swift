import ArgumentParser
import AppSandbox

struct Container: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "container",
        abstract: "Show or renew an app's container.",
        subcommands: [Path.self, Reinstall.self]
    )

    struct Path: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "path", abstract: "Print the app's current container (created if absent).")
        @OptionGroup var app: AppOptions

        func run() throws {
            let container = try AppContainer.current(for: try app.appID(), base: try AppOptions.containerBase())
            print(container.root)
        }
    }

    struct Reinstall: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "reinstall",
            abstract: "Move the app's container to a new install id, as an app update does.",
            discussion: "Contents move along; every absolute path the app stored to its old container breaks, exactly as on iOS."
        )
        @OptionGroup var app: AppOptions

        func run() throws {
            let (old, new) = try AppContainer.reinstall(try app.appID(), base: try AppOptions.containerBase())
            Console.lines("moved \(old.root)", "   to \(new.root)")
            print(new.root)
        }
    }
}
